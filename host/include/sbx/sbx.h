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
/* Logging                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * The library and its plugins (in this process or in their plugin host,
 * which inherits the environment and stderr) log to stderr, one line per
 * message, "sbx[BACKEND]: MESSAGE", only as the environment variable
 * SBX_DEBUG asks, read at each message:
 *
 *   unset, "" or "0"   nothing
 *   "1" (or any value  everything: errors, warnings, info and debug
 *   not listed here)
 *   "error"            errors only
 *   "warning"          errors and warnings
 *   "info"             errors, warnings and info
 *   "debug"            everything, as "1"
 *
 * The level names are matched without regard to case. Logging never
 * changes what a call returns; nothing is logged by default.
 */

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/**
 * sbx_error_code:
 * Stable error codes. The names are the reference system's `code` strings
 * (sbx_error_code_name() returns them); invalid_argument, rate_limited,
 * cancelled and resource_exhausted are this library's additions. cancelled
 * is not retryable; its outcome is unknown when the call had started,
 * failed when it never ran. resource_exhausted is the local machine running
 * out of memory, descriptors, threads or processes (ENOMEM, EMFILE, EAGAIN
 * from fork or pthread_create); it is not retryable.
 * No error this library or its plugins report carries SBX_ERROR_UNKNOWN:
 * it remains only as the value of a code a newer peer sent that this build
 * does not know, and of sbx_error_get_code(NULL).
 * Values are explicit and append-only: a code is never renumbered or reused.
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
    SBX_ERROR_INVALID_ARGUMENT = 13,     /* bad value from the caller */
    SBX_ERROR_CANCELLED = 14,            /* the caller cancelled the call (sbx_op_cancel) */
    SBX_ERROR_RESOURCE_EXHAUSTED = 15    /* out of memory, descriptors, threads, processes */
} sbx_error_code;

/** Number of defined codes; every value below it has a name. */
#define SBX_ERROR_CODE_COUNT 16

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
 * set); an error whose outcome is SBX_ERROR_OUTCOME_UNKNOWN has
 * ", outcome=unknown" after the code and ", retryable", so a log line
 * says that the operation may have happened. A context value's control characters (below 0x20, and 0x7f) are
 * written as \n, \r, \t or \xNN, so the bracket stays on one line
 * (sbx_error_get0_context() gives the bytes). Returns a new string the caller frees with free(); NULL only when
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
#define SBX_CAP_PTY             (UINT64_C(1) << 6)  /* commands on a terminal (tty_rows) */
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
/*
 * SBX_CAP_EXEC_STDIN_STREAM: stdin written to a running process
 * (SBX_EXEC_STDIN_OPEN, sbx_process_write_stdin()) reaches the command as
 * it is written, so a command can answer a line before the next is
 * written. Without it (daytona, cloudflare: the provider takes a command's
 * stdin as a file staged before the command starts), a process's stdin is
 * delivered whole once sbx_process_close_stdin() is called, and the
 * command starts only then: write, close, then wait for output. A terminal
 * (tty_rows/tty_cols, SBX_CAP_PTY) is interactive either way. Since 0.1.
 */
#define SBX_CAP_EXEC_STDIN_STREAM (UINT64_C(1) << 18)
#define SBX_CAP_USER            (UINT64_C(1) << 19) /* a create-time user (sbx_options_set_user) */
/*
 * SBX_CAP_OWNER_WATCH: the backend itself ends an attached sandbox once
 * every process that owns it has ended, SIGKILL included, in both plugin
 * modes (local, bubblewrap, safehouse: the sandbox's supervisor holds a
 * pidfd of each owner). Only such a backend takes an attached sandbox
 * without a lifetime (SBX_TIMEOUT_NONE). Since 0.1.
 */
#define SBX_CAP_OWNER_WATCH     (UINT64_C(1) << 20)

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
 * for loading), loads each and checks it, each in a helper process of its
 * own (`sbx-plugin-host --inspect`), so that a plugin that crashes while
 * loading does not crash the caller: it is listed with the problem
 * "crashed while loading in a helper process (killed by signal N (SIGX))".
 * (Without the helper program the files are loaded in this process.) A
 * plugin that fails a check is listed with the reason instead of being
 * used. On success stores a new
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

/** One backend, reused across many sandboxes (shared connection state). */
typedef struct sbx_client sbx_client;
/** One sandbox. */
typedef struct sbx_sandbox sbx_sandbox;
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
    SBX_OPTION_GIT_REF = 1u << 6,
    SBX_OPTION_IMAGE = 1u << 7,
    SBX_OPTION_TEMPLATE = 1u << 8,
    SBX_OPTION_SNAPSHOT_ID = 1u << 9,
    SBX_OPTION_APP_NAME = 1u << 10,
    SBX_OPTION_GPU = 1u << 11,
    SBX_OPTION_DISK_MB = 1u << 12,
    SBX_OPTION_ALLOW_INTERNET = 1u << 13,
    SBX_OPTION_BACKEND_OPTIONS = 1u << 14,
    SBX_OPTION_PRESET = 1u << 15,
    SBX_OPTION_FILES = 1u << 16,
    SBX_OPTION_WORKSPACE = 1u << 17,
    SBX_OPTION_DETACHED = 1u << 18,
    SBX_OPTION_PORTS = 1u << 19,
    SBX_OPTION_USER = 1u << 20
} sbx_option_field;

/** Defaults of the reference's SandboxConfig. */
#define SBX_DEFAULT_CPU 1.0
#define SBX_DEFAULT_MEMORY_MB 1024
#define SBX_DEFAULT_TIMEOUT_SECS 600.0
/**
 * SBX_TIMEOUT_NONE: the timeout_secs of a sandbox without a lifetime
 * (sbx_options_set_timeout_secs()): it lives until destroy or the end of
 * its last owner, and its commands have no default timeout. JSON carries
 * it as -1 (session state "timeout_secs": -1).
 */
#define SBX_TIMEOUT_NONE (-1.0)

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
 * The directory commands start in, inside the sandbox, on every backend;
 * made (with its parents) when missing. On `local` and `safehouse`, which
 * see the host's filesystem, it is a host directory and the sandbox root
 * itself (file paths resolve under it; a relative path is relative to the
 * creating process's directory); it is never deleted, but what create made
 * of it is removed again when create fails. On `bubblewrap` and `docker`
 * it is an absolute path inside (a relative one, or one with "..", is
 * invalid_argument naming it); on bubblewrap a path in the read-only
 * system tree (/usr, /etc, ...) must exist there, and /proc, /dev and
 * /.sbx are refused (bubblewrap's backend option "root_dir" names a host
 * directory to be the sandbox's "/"). @path is copied; it must be
 * non-empty and contain no NUL. Since 0.1.
 */
SBX_EXPORT int sbx_options_set_workdir(sbx_options *options, const char *path,
                                       sbx_error **error);

/**
 * sbx_options_set_timeout_secs:
 * The sandbox's lifetime (ended by the backend where it has
 * SBX_CAP_LIFETIME: docker, local, bubblewrap, ray and cloudflare among
 * others; on local, bubblewrap, ray and cloudflare counted from
 * readiness, calls after it fail with not_found naming the expiry; the
 * README's lifetime table says who ends what on each backend), and the
 * default exec timeout: what is left of the lifetime, as
 * the creating process counts it from the create call (at least 1 s; an
 * exec's own timeout overrides it). Seconds, > 0 and finite; default
 * SBX_DEFAULT_TIMEOUT_SECS.
 *
 * SBX_TIMEOUT_NONE asks for no lifetime: the sandbox lives until
 * sbx_sandbox_destroy() or until every process that owns it has ended
 * (see sbx_options_set_detached()), and a command without a timeout of its
 * own has none. It is only for an attached sandbox on a backend with
 * SBX_CAP_OWNER_WATCH (local, bubblewrap, safehouse), where something
 * other than the lifetime bounds the sandbox in both plugin modes: create
 * refuses it with a configuration error (contexts "option":
 * "timeout_secs", "reason") for a detached sandbox ("a detached sandbox
 * needs a lifetime: nothing else ends it") and on any other backend
 * ("backend B cannot end an attached sandbox when its owners end, so it
 * needs a lifetime"), and sbx_sandbox_detach() refuses to detach such a
 * sandbox. Its lifecycle record has no expiry (sbx_gc() reaps it only
 * once its owners are gone), and its session state says "timeout_secs":
 * -1.
 *
 * Errors: invalid_argument for 0, NaN, an infinity or a negative other
 * than SBX_TIMEOUT_NONE ("timeout_secs must be seconds > 0 and finite, or
 * SBX_TIMEOUT_NONE for no lifetime (got 0)"). Since 0.1.
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
 * ".git"), as the reference does. @url may be a local path (works offline):
 * on a backend with SBX_CAP_ISOLATION (docker, bubblewrap), whose sandbox
 * cannot see the host's path, the repository is carried in (a git bundle
 * of HEAD and every branch and tag, made with this host's git, written to
 * the sandbox's /tmp, cloned from there and removed; the clone's origin is
 * @url).
 * @ref may be NULL (the default branch). Both copied; @url must be
 * non-empty and must not start with '-'. A failed clone fails the create
 * with creation_failed naming the step "git_clone", and the sandbox is
 * destroyed. Since 0.1.
 */
SBX_EXPORT int sbx_options_set_git_repo(sbx_options *options, const char *url,
                                        const char *ref, sbx_error **error);

/**
 * sbx_options_set_image / set_template / set_snapshot_id / set_app_name:
 * Provider-side names, copied: the container image ("python:3.12-slim";
 * docker, modal, daytona, ...), the provider's template (e2b), a snapshot
 * to start from (an id returned by a snapshot call), and the application
 * name grouping sandboxes (modal). Each must be non-empty. A backend without
 * the notion refuses a set value with a configuration error naming it.
 * Since 0.1.
 */
SBX_EXPORT int sbx_options_set_image(sbx_options *options, const char *image,
                                     sbx_error **error);
SBX_EXPORT int sbx_options_set_template(sbx_options *options, const char *template_name,
                                        sbx_error **error);
SBX_EXPORT int sbx_options_set_snapshot_id(sbx_options *options, const char *snapshot_id,
                                           sbx_error **error);
SBX_EXPORT int sbx_options_set_app_name(sbx_options *options, const char *app_name,
                                        sbx_error **error);

/**
 * sbx_options_set_gpu:
 * GPUs as "TYPE" or "TYPE:COUNT" (e.g. "H100:2"; COUNT a positive integer,
 * 1 when absent), the reference's notation. Copied. Errors: invalid_argument
 * naming the value. Since 0.1.
 */
SBX_EXPORT int sbx_options_set_gpu(sbx_options *options, const char *gpu,
                                   sbx_error **error);

/**
 * sbx_options_set_disk_mb: disk in MiB, > 0; unset = the provider's
 * default. Since 0.1.
 */
SBX_EXPORT int sbx_options_set_disk_mb(sbx_options *options, int64_t disk_mb,
                                       sbx_error **error);

/**
 * sbx_options_set_allow_internet: 0 cuts the sandbox off the network (only
 * its own loopback), non-zero allows it (the default). Since 0.1.
 */
SBX_EXPORT int sbx_options_set_allow_internet(sbx_options *options, int allow,
                                              sbx_error **error);

/**
 * sbx_options_set_detached / get_detached:
 * 1 makes the sandbox detached: it outlives the process that created it,
 * until sbx_sandbox_destroy() or the end of its lifetime (timeout_secs).
 * 0 (the default) makes it attached: it belongs to the processes that
 * created or resumed it (the lifecycle record's owners) and is destroyed
 * once every one of them has ended without destroying it. A handle can be
 * detached later with sbx_sandbox_detach(). A sandbox handed to another
 * process through its session state after its creator ends must be
 * detached.
 *
 * Who destroys an attached sandbox, on every backend (local, bubblewrap,
 * safehouse, docker):
 *  - out of process (the default plugin mode): the plugin host of the
 *    client that created or resumed it. When the owning process ends
 *    without destroying it (normal exit, crash, SIGKILL, or after freeing
 *    the client), the host, which outlives it, removes it as an owner and
 *    destroys the sandbox, within a few seconds, unless another owner
 *    lives; the row goes with it. Freeing the client does not wait for
 *    this: the host stays until the process ends. A host that is itself
 *    killed destroys nothing: the application's next call on the client
 *    starts a new host that takes its sandboxes over; if the application
 *    dies first, sbx_gc() reaps them.
 *  - in process: nothing runs after the process ends; sbx_gc() (`sbx gc`)
 *    reaps attached sandboxes whose owners are all gone.
 * Errors: invalid_argument for NULL @options. Thread safety: as every
 * options setter (one thread per options object). Since 0.1.
 */
SBX_EXPORT int sbx_options_set_detached(sbx_options *options, int detached,
                                        sbx_error **error);
SBX_EXPORT int sbx_options_get_detached(const sbx_options *options);

/**
 * sbx_options_add_port:
 * Exposes TCP port @port (1..65535) of the sandbox to this host: after
 * create, sbx_sandbox_resolve_port() says where to connect for it. Adding
 * a port twice keeps one. Which backends can, and what the endpoint is:
 *  - docker: published on 127.0.0.1 only (never 0.0.0.0), on a host port
 *    the Engine picks ("127.0.0.1:49153");
 *  - local: the sandbox shares the host's network, so the port is the
 *    port ("127.0.0.1:8080");
 *  - bubblewrap: as local while it shares the host's network; a sandbox
 *    with allow_internet=0 has a network namespace of its own that the
 *    host cannot reach: feature_not_supported naming the reason;
 *  - hosted providers with preview addresses: an https URL (E2B
 *    "https://8080-ID.DOMAIN", Tensorlake
 *    "https://8080-ID.sandbox.tensorlake.ai", Daytona the preview link
 *    it answers for the port (a private sandbox's link asks for its
 *    preview token, which the library never logs, stores or returns),
 *    Cloudflare the URL of the tunnel its Sandbox Bridge opens to the
 *    port);
 *  - every other backend refuses the create with feature_not_supported
 *    naming the backend (a backend whose plugin lacks
 *    SBX_CAP_EXPOSED_PORTS, or predates plugin ABI 1.3).
 * Errors: invalid_argument naming a port out of range (context port).
 * Since 0.1 (plugin ABI 1.3).
 */
SBX_EXPORT int sbx_options_add_port(sbx_options *options, unsigned port, sbx_error **error);

/**
 * sbx_options_set_user:
 * The sandbox's default user: a name or a numeric uid as the sandbox's own
 * user database has it (copied). Commands (sbx_exec_request.user NULL) and
 * file calls that name no user of their own run as it, and what the file
 * calls write belongs to it (CASE-45). Which backends can:
 *  - docker: the container's User (the Engine's Config.User; "USER:GROUP"
 *    also taken), which replaces the image's USER; a user the image's
 *    passwd lacks fails the create with the Engine's message naming it;
 *  - bubblewrap: the uid (and gid) the sandbox's processes have inside its
 *    user namespace (bwrap --uid/--gid), a number, or a name the
 *    sandbox's /etc/passwd (the image's, else the host's) resolves; the
 *    gid is the user's primary group there, else the uid; outside it
 *    stays the unprivileged uid the sandbox always runs as; HOME stays
 *    the sandbox's root "/", which belongs to that user;
 *  - e2b: envd's user for commands and files ("user" or "root");
 *  - every other backend (local included: its commands run as the calling
 *    user) refuses the create with feature_not_supported naming the
 *    backend and the user (context user), before anything is made
 *    (a plugin without SBX_CAP_USER, or older than plugin ABI 1.4).
 * Errors: invalid_argument when @user is NULL, empty, longer than 256
 * bytes or holds whitespace or control characters (context user). Since
 * 0.1 (plugin ABI 1.4).
 */
SBX_EXPORT int sbx_options_set_user(sbx_options *options, const char *user, sbx_error **error);
/** The user set with sbx_options_set_user (borrowed), or NULL. Since 0.1. */
SBX_EXPORT const char *sbx_options_get0_user(const sbx_options *options);

/**
 * sbx_options_set_backend_options:
 * Provider-specific settings as a JSON object (e.g. '{"create_timeout":120}'),
 * copied; passed to the backend as is. Errors: invalid_argument when
 * @json is not a JSON object (the parser's message included). Since 0.1.
 */
SBX_EXPORT int sbx_options_set_backend_options(sbx_options *options, const char *json,
                                               sbx_error **error);

/**
 * sbx_options_set_preset:
 * Names a preset (see "Presets" below) whose values become the defaults of
 * every option the caller does not set: explicit options always win, and a
 * backend refuses a preset value it cannot honour only when the caller set
 * the option. The preset is looked up at create (not_found there when no
 * preset has that name). @name must match [a-z0-9][a-z0-9._-]*
 * (invalid_argument otherwise); copied. Since 0.1.
 */
SBX_EXPORT int sbx_options_set_preset(sbx_options *options, const char *name,
                                      sbx_error **error);
/** Borrowed; NULL when unset. */
SBX_EXPORT const char *sbx_options_get0_preset(const sbx_options *options);

/**
 * sbx_options_add_file:
 * A file written into the sandbox at create, after the git clone and before
 * the workspace manifest: @len bytes of @data (copied) at sandbox path
 * @path, mode 0644, parents created. A later file with the same path
 * replaces the earlier one. Errors: invalid_argument for an empty path.
 * Since 0.1.
 */
SBX_EXPORT int sbx_options_add_file(sbx_options *options, const char *path,
                                    const void *data, size_t len, sbx_error **error);

/** A workspace manifest (see "Workspace manifest" below). */
typedef struct sbx_manifest sbx_manifest;

/**
 * sbx_options_set_workspace:
 * The manifest applied at create, after the files. The options keep a
 * reference to @manifest (entries added later are seen at create); the
 * caller still frees its own with sbx_manifest_free(). NULL clears it.
 * Since 0.1.
 */
SBX_EXPORT int sbx_options_set_workspace(sbx_options *options, sbx_manifest *manifest,
                                         sbx_error **error);

/** Which stream a chunk of output came from. */
typedef enum sbx_stream {
    SBX_STREAM_STDOUT = 1,
    SBX_STREAM_STDERR = 2
} sbx_stream;

/**
 * sbx_progress_event: what a progress report (sbx_progress) is about.
 *  - SBX_PROGRESS_STEP_START: a creation step begins (before it runs).
 *  - SBX_PROGRESS_STEP_OUTPUT: a chunk of the running step's output.
 *  - SBX_PROGRESS_STEP_END: the step ended (successfully or not).
 * Values are fixed; new events are appended: ignore unknown ones.
 */
typedef enum sbx_progress_event {
    SBX_PROGRESS_STEP_START = 1,
    SBX_PROGRESS_STEP_OUTPUT = 2,
    SBX_PROGRESS_STEP_END = 3
} sbx_progress_event;

/**
 * sbx_progress: one progress report of a create, borrowed for the
 * callback's duration only (copy what you keep). Fields are only ever
 * appended; read past struct_size never.
 *  - step: the creation step, "preset_setup" (each preset setup command
 *    is one step).
 *  - name: what the step belongs to (the preset's name).
 *  - index / count: this command's position, 1-based, of count.
 *  - command: the command, as the preset gives it (run with /bin/sh -c).
 *  - stream, data, len (STEP_OUTPUT only): the chunk, in order within
 *    each stream, as sbx_output_fn gets it; not NUL-terminated.
 *  - exit_code, timed_out (STEP_END only): as a result's (0..255, 128+N
 *    for signal N, 124 with timed_out = 1); -1 when the command could not
 *    run at all (the create's error says why).
 *  - duration_secs (STEP_END only): wall time of the step, seconds.
 */
typedef struct sbx_progress {
    size_t struct_size;
    sbx_progress_event event;
    const char *step;
    const char *name;
    size_t index;
    size_t count;
    const char *command;
    sbx_stream stream;
    const void *data;
    size_t len;
    int exit_code;
    int timed_out;
    double duration_secs;
} sbx_progress;

/** Progress callback; see sbx_options_set_progress(). */
typedef void (*sbx_progress_fn)(const sbx_progress *progress, void *user_data);

/**
 * sbx_options_set_progress:
 * Reports the long steps of a create made with these options (today the
 * preset setup commands) to @fn as they happen: a STEP_START before each
 * command, its output as STEP_OUTPUT chunks, a STEP_END with its exit code
 * and duration. @fn runs on the thread that runs the create (a worker for
 * sbx_create_async) and must not call into the sandbox being made; it
 * returns nothing and cannot stop the create. NULL @fn turns reports off
 * (the default). @user_data is passed to @fn as is, borrowed for as long
 * as the options and the creates that use them. Not a creation field:
 * sbx_options_is_set() knows nothing of it and backends never see it.
 * Errors: invalid_argument for NULL @options. Thread safety: as every
 * options setter. Since 0.1.
 */
SBX_EXPORT int sbx_options_set_progress(sbx_options *options, sbx_progress_fn fn,
                                        void *user_data, sbx_error **error);

/**
 * sbx_options_is_set: 1 when the caller set @field, else 0. Since 0.1.
 */
SBX_EXPORT int sbx_options_is_set(const sbx_options *options,
                                  sbx_option_field field);

/** Getters; they return the default when the field is unset. */
SBX_EXPORT double sbx_options_get_timeout_secs(const sbx_options *options);
SBX_EXPORT double sbx_options_get_cpu(const sbx_options *options);
SBX_EXPORT int64_t sbx_options_get_memory_mb(const sbx_options *options);
/** 0 when unset (the provider's default). */
SBX_EXPORT int64_t sbx_options_get_disk_mb(const sbx_options *options);
/** 1 unless set to 0. */
SBX_EXPORT int sbx_options_get_allow_internet(const sbx_options *options);
/** Borrowed; NULL when unset. */
SBX_EXPORT const char *sbx_options_get0_workdir(const sbx_options *options);
SBX_EXPORT const char *sbx_options_get0_image(const sbx_options *options);
SBX_EXPORT const char *sbx_options_get0_template(const sbx_options *options);
SBX_EXPORT const char *sbx_options_get0_snapshot_id(const sbx_options *options);
SBX_EXPORT const char *sbx_options_get0_app_name(const sbx_options *options);
SBX_EXPORT const char *sbx_options_get0_gpu(const sbx_options *options);
SBX_EXPORT const char *sbx_options_get0_backend_options(const sbx_options *options);
SBX_EXPORT const char *sbx_options_get0_env(const sbx_options *options,
                                            const char *key);

/* ------------------------------------------------------------------------ */
/* Presets                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * A preset is a named set of creation defaults plus setup commands, kept as
 * a JSON data file (format documented in presets/README.md):
 *
 *   {"format": 1, "name": "claude-code", "description": "...",
 *    "image": "...", "backend_images": {"tensorlake": "..."},
 *    "setup_commands": ["npm install -g @anthropic-ai/claude-code"],
 *    "backend_setup_commands": {"tensorlake": ["..."]},
 *    "setup_before_workspace": false, "cpu": 1, "memory_mb": 2048,
 *    "timeout_secs": 1800, "env": {"K": "V"}, "allow_internet": true}
 *
 * Lookup by name, first match wins: presets registered at run time, then
 * NAME.json in each directory of SBX_PRESET_PATH (colon-separated), then in
 * ${XDG_CONFIG_HOME:-$HOME/.config}/sbx/presets, then the built-in presets
 * in $(pkgdatadir)/presets (claude-code, codex, claude-code-codex).
 *
 * At create, the setup commands (setup_commands, then
 * backend_setup_commands[backend]) run with /bin/sh -c after the workspace,
 * or before the git clone when setup_before_workspace is true. They are
 * skipped when the sandbox was made from the preset's image (a backend with
 * the image capability, and the caller set no image of its own). Each one
 * is reported to the options' progress callback (sbx_options_set_progress)
 * as it starts, while it writes and when it ends. A failing command fails
 * the create with creation_failed, step "preset_setup", contexts
 * "command", "exit_code" (absent when it could not run) and, for each
 * stream it wrote to, "stdout_tail" / "stderr_tail": its last
 * SBX_PRESET_TAIL_BYTES bytes (the sandbox is destroyed, so this is what
 * survives of the output). The message ends with the same tails:
 *
 *   preset setup command 2 of 3 failed with exit code 3: CMD
 *   --- stdout ---
 *   TAIL
 *   --- stderr (last 4096 of 10000 bytes) ---
 *   TAIL
 *
 * (a stream that wrote nothing is left out; a trailing newline of a tail
 * is not doubled).
 */
/** Bytes of each stream of a failing setup command kept in its error. */
#define SBX_PRESET_TAIL_BYTES 4096

typedef struct sbx_preset sbx_preset;

/**
 * sbx_preset_parse:
 * Parses a preset document (borrowed). Errors: invalid_argument naming the
 * bad key or value (unknown keys are refused, so typos do not pass
 * silently). Free the result with sbx_preset_free(). Since 0.1.
 */
SBX_EXPORT sbx_preset *sbx_preset_parse(const char *json, sbx_error **error);

/**
 * sbx_preset_load:
 * Finds the preset @name in the lookup order above. Errors: not_found
 * (context "searched"), invalid_argument for a bad name or document, for a
 * preset file that is not a regular file (a fifo, a directory, a device:
 * opened without blocking, never read; the message names the path and
 * what it is, context "source"), and for a file whose "name" is not @name
 * (the message names both; contexts "name", "file_name" and "source").
 * Since 0.1.
 */
SBX_EXPORT sbx_preset *sbx_preset_load(const char *name, sbx_error **error);

/**
 * sbx_preset_register:
 * Registers the preset document @json for this process, replacing a
 * registered preset of the same name; it shadows files of that name.
 * Thread-safe. Returns 0 or -1 (invalid_argument). Since 0.1.
 */
SBX_EXPORT int sbx_preset_register(const char *json, sbx_error **error);

/**
 * sbx_presets_list:
 * Every preset visible by the lookup order (one per name, the one that
 * wins), sorted by name. A file that does not parse, is not a regular
 * file, or names another preset than its file name is left out (with a
 * warning in the SBX_DEBUG log naming the file and why). Stores a
 * new array in *@list (free with sbx_preset_list_free). Returns 0 or -1.
 * Since 0.1.
 */
SBX_EXPORT int sbx_presets_list(sbx_preset ***list, size_t *count, sbx_error **error);
SBX_EXPORT void sbx_preset_list_free(sbx_preset **list, size_t count);
SBX_EXPORT void sbx_preset_free(sbx_preset *preset);

/** Borrowed accessors; get0_source is the file path or "registered". */
SBX_EXPORT const char *sbx_preset_get0_name(const sbx_preset *preset);
SBX_EXPORT const char *sbx_preset_get0_description(const sbx_preset *preset);
SBX_EXPORT const char *sbx_preset_get0_source(const sbx_preset *preset);
/** The image for @backend (backend_images, else image); NULL when none. */
SBX_EXPORT const char *sbx_preset_get0_image(const sbx_preset *preset, const char *backend);
/** The preset as a JSON document (new string, free()); NULL on OOM. */
SBX_EXPORT char *sbx_preset_to_json(const sbx_preset *preset);

/* ------------------------------------------------------------------------ */
/* Workspace manifest                                                        */
/* ------------------------------------------------------------------------ */

/*
 * An ordered list of entries, each materialised at a sandbox path when the
 * sandbox is created (the reference's Manifest): a file with given bytes,
 * a host file (its executable bit kept), a host directory (one tar stream),
 * a git repository, or a custom entry made by a callback. Entries apply in
 * the order they were added; a later entry overlays an earlier one at the
 * same or an enclosing path. A failing entry fails the create with
 * creation_failed, step "workspace", context "dest". A manifest is not
 * thread-safe while entries are added; at create it is only read.
 */

/** New empty manifest; free with sbx_manifest_free(). NULL on OOM. */
SBX_EXPORT sbx_manifest *sbx_manifest_new(void);
/** Drops the caller's reference (options may hold their own). NULL ignored. */
SBX_EXPORT void sbx_manifest_free(sbx_manifest *manifest);

/** File(content): @len bytes of @data (copied), permission bits @mode. */
SBX_EXPORT int sbx_manifest_add_file(sbx_manifest *manifest, const char *dest,
                                     const void *data, size_t len, uint32_t mode,
                                     sbx_error **error);
/** LocalFile(path): the host file @local_path (read at create). */
SBX_EXPORT int sbx_manifest_add_local_file(sbx_manifest *manifest, const char *dest,
                                           const char *local_path, sbx_error **error);
/** LocalDir(path): the host directory @local_dir, copied by upload_dir. */
SBX_EXPORT int sbx_manifest_add_local_dir(sbx_manifest *manifest, const char *dest,
                                          const char *local_dir, sbx_error **error);
/** GitRepo(repo, ref, depth): `git clone [--depth N] [--branch REF] -- URL DEST`;
 *  @ref may be NULL; @depth 0 = full history. */
SBX_EXPORT int sbx_manifest_add_git_repo(sbx_manifest *manifest, const char *dest,
                                         const char *url, const char *ref, int depth,
                                         sbx_error **error);

/**
 * sbx_manifest_entry_fn:
 * A custom entry: materialise something at sandbox path @dest in @sandbox
 * (borrowed, usable with every sbx_sandbox_* call). Return 0, or -1 with
 * *@error set.
 */
typedef int (*sbx_manifest_entry_fn)(sbx_sandbox *sandbox, const char *dest,
                                     void *user_data, sbx_error **error);

/** Adds a custom entry; @free_fn (may be NULL) frees @user_data when the
 *  manifest is finally freed. */
SBX_EXPORT int sbx_manifest_add_custom(sbx_manifest *manifest, const char *dest,
                                       sbx_manifest_entry_fn fn, void *user_data,
                                       void (*free_fn)(void *), sbx_error **error);

/** Number of entries. */
SBX_EXPORT size_t sbx_manifest_get_count(const sbx_manifest *manifest);

/* ------------------------------------------------------------------------ */
/* Clients and sandboxes                                                     */
/* ------------------------------------------------------------------------ */


/**
 * sbx_client_new:
 * A client for @backend ("local", "docker", ...). Checks the name
 * ([a-z0-9][a-z0-9_-]*, else invalid_argument) and loads and checks the
 * plugin; does no network or provider I/O. Errors: backend_not_installed
 * (the message and context "installed" list the backends that are
 * installed, ", "-separated, "none" in the message when there is none;
 * context "searched": the directories searched; for a backend this project
 * ships or plans, i.e. local, bubblewrap, safehouse, docker, e2b, daytona,
 * modal, tensorlake, vercel, cloudflare, blaxel, runloop, runpod, ray and
 * kubernetes, "package": the package that provides it, also named in the
 * message; other names get no package hint), or the plugin's problem. Thread-safe; the client may be shared by
 * threads. Free with sbx_client_free() after every sandbox made from it.
 * Since 0.1.
 */
SBX_EXPORT sbx_client *sbx_client_new(const char *backend, sbx_error **error);

/** sbx_client_free: frees @client; NULL ignored. Stops its plugin host
 *  (out-of-process) after the plugin freed its client. Since 0.1. */
SBX_EXPORT void sbx_client_free(sbx_client *client);

/**
 * sbx_plugin_mode:
 * Where a client's plugin runs.
 *  - SBX_PLUGIN_MODE_DEFAULT: the environment variable SBX_PLUGIN_MODE
 *    ("inprocess" or "outofprocess") when set, else out-of-process.
 *  - SBX_PLUGIN_MODE_OUT_OF_PROCESS: in an sbx-plugin-host process of the
 *    client's own (one per client, serving all its sandboxes and
 *    concurrent calls). A plugin that crashes or hangs fails only this
 *    client's calls in flight, with a retryable connection (or timeout)
 *    error naming the signal; the next call on the client or a sandbox
 *    starts a new host and resumes there the sandboxes that have a session
 *    state (a call on a process of the dead host fails with a connection
 *    error and starts none). The host program is
 *    $SBX_PLUGIN_HOST or the installed one.
 *  - SBX_PLUGIN_MODE_IN_PROCESS: dlopen()ed into this process, for the
 *    lowest latency; a plugin crash is the application's crash.
 * Both modes pass the same conformance suite.
 */
typedef enum sbx_plugin_mode {
    SBX_PLUGIN_MODE_DEFAULT = 0,
    SBX_PLUGIN_MODE_OUT_OF_PROCESS = 1,
    SBX_PLUGIN_MODE_IN_PROCESS = 2
} sbx_plugin_mode;

/**
 * sbx_client_new_with_mode:
 * sbx_client_new() with the plugin mode chosen by the caller. Errors as
 * sbx_client_new(), plus invalid_argument for a mode outside the enum or,
 * with SBX_PLUGIN_MODE_DEFAULT, an SBX_PLUGIN_MODE value that is neither
 * "inprocess" nor "outofprocess" (context "SBX_PLUGIN_MODE"); out of
 * process: configuration when the host program cannot be started (context
 * "path"), connection when it died before it was ready (naming the signal).
 * Thread-safe. Since 0.1.
 */
SBX_EXPORT sbx_client *sbx_client_new_with_mode(const char *backend, sbx_plugin_mode mode,
                                                sbx_error **error);

/**
 * sbx_client_new_with_config:
 * sbx_client_new_with_mode() with client options for the plugin: @config_json
 * is a JSON object (borrowed; copied) handed to the plugin's client_new, and
 * again to each plugin host started after a crash. NULL or "" means none.
 * What each backend takes is its own and listed in the plugin's
 * description (`sbx backends`); the hosted backends (daytona, e2b,
 * tensorlake, runloop, vercel) take "api_url" (before their standard URL variable),
 * "retries" (re-sends of a call that is safe to repeat; 0 sends every call
 * once), "rate_limit_retries" (re-sends of a create refused with 429) and
 * "max_retry_wait_s"; tensorlake also takes "suspendable"; e2b also takes
 * "keepalive_s" (seconds above 0 and at most 86400, rounded up to whole
 * seconds; default 20: how long a process stream may be quiet before envd
 * sends a keepalive message; set it below the idle timeout of a proxy or
 * NAT on the path); daytona also takes "refresh_activity_s" (seconds, 0
 * or from 1 to 86400; 0: never; default 60, or a quarter of the sandbox's
 * autoStopInterval when that is shorter, never when it is 0: how often the
 * sandbox's activity is renewed while commands run, so that Daytona's idle
 * stop does not stop it under a quiet one); blaxel also takes "workspace"
 * and "region" (before BL_WORKSPACE and BL_REGION); vercel also takes "team_id"
 * and "project_id" (before VERCEL_TEAM_ID and VERCEL_PROJECT_ID); modal takes "server_url" and
 * "failover_url" (gRPC endpoints, before MODAL_SERVER_URL), "environment"
 * (before MODAL_ENVIRONMENT), "app_name" (the default app, "libsbx") and
 * the retry keys above. A value of the
 * wrong type is a configuration error from the plugin naming the key.
 * ray takes "address" (before RAY_ADDRESS), "root_dir", "python" and the
 * retry keys.
 * kubernetes takes "kubeconfig" (a path, before KUBECONFIG and
 * ~/.kube/config), "context" (before the kubeconfig's current-context),
 * "namespace" (before the context's), "in_cluster" (true: the service
 * account's token and CA), "image" (the pods' default image),
 * "grace_period_s" (delete; 0..3600, default 2) and the retry keys.
 * docker takes "host", "image" and "network_mode" (before DOCKER_HOST,
 * SBX_DOCKER_IMAGE and SBX_DOCKER_NETWORK) and refuses any other key;
 * local, bubblewrap and safehouse take none and ignore the object. Errors as
 * sbx_client_new_with_mode(), plus invalid_argument when @config_json is not
 * a JSON object (context "config"). Thread-safe. Since 0.1.
 */
SBX_EXPORT sbx_client *sbx_client_new_with_config(const char *backend, sbx_plugin_mode mode,
                                                  const char *config_json, sbx_error **error);

/**
 * sbx_plugin_mode_resolve:
 * What @mode means here: SBX_PLUGIN_MODE_DEFAULT becomes the mode the
 * environment selects. Returns SBX_PLUGIN_MODE_OUT_OF_PROCESS or
 * SBX_PLUGIN_MODE_IN_PROCESS, or -1 with *@error set (invalid_argument) for
 * a bad mode or SBX_PLUGIN_MODE value. Since 0.1.
 */
SBX_EXPORT int sbx_plugin_mode_resolve(sbx_plugin_mode mode, sbx_error **error);

/** sbx_plugin_mode_name: "inprocess", "outofprocess" or "default"; static. Since 0.1. */
SBX_EXPORT const char *sbx_plugin_mode_name(sbx_plugin_mode mode);

/** sbx_client_get_plugin_mode: SBX_PLUGIN_MODE_OUT_OF_PROCESS or
 *  SBX_PLUGIN_MODE_IN_PROCESS (never DEFAULT); DEFAULT for NULL. Since 0.1. */
SBX_EXPORT sbx_plugin_mode sbx_client_get_plugin_mode(const sbx_client *client);

/** sbx_client_get_host_pid: the pid of the client's plugin host process; 0
 *  in-process, for NULL, or while no host runs (after a crash, until the
 *  next call starts one). Since 0.1. */
SBX_EXPORT int sbx_client_get_host_pid(const sbx_client *client);

/**
 * sbx_client_set_call_timeout:
 * A deadline of @secs seconds (> 0; 0 removes it) for each plugin call of
 * @client, handed to the plugin in its call context (the hosted plugins
 * bound every HTTP request by it, and a create that times out deletes
 * what it may have made). Out of process a call past it is also cancelled
 * (the plugin's cancel descriptor fires); when the plugin does not answer
 * within 2 s after that, its host is killed, the call fails with a timeout
 * error and the next call starts a new host. In process only the plugin's
 * own honouring of the deadline bounds the call (a plugin running in the
 * application's own process cannot be stopped safely).
 * Covers single slot calls (create, destroy, a file call, one exec's start
 * and wait steps), not an exec's whole run: that is the exec timeout.
 * Returns 0, or -1 (invalid_argument naming the value: negative, NaN or
 * infinite). Not to be called while other threads use @client. Since 0.1.
 */
SBX_EXPORT int sbx_client_set_call_timeout(sbx_client *client, double secs,
                                           sbx_error **error);

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
 * defaults); it is not kept. Order (the reference's): the sandbox exists,
 * [preset setup when the preset asks for it first], git clone, files,
 * workspace manifest, preset setup. Any failure after the provider made the
 * sandbox destroys it before returning, and the error names the step
 * (context "step": git_clone, files, workspace, preset_setup). Errors:
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
 * sbx_sandbox_create() on a client of @backend that this process shares
 * among every sandbox made by sbx_create() or sbx_resume() (one per backend
 * and plugin mode, the mode as SBX_PLUGIN_MODE says at the time): made on
 * first use and kept for the rest of the process, also after the last of
 * those sandboxes' handles is freed, so a later sbx_create() does not
 * start a plugin host again (out of process the host ends with the
 * process, destroying the attached sandboxes left). So 100 sandboxes made this way cost one
 * plugin host, as on one client of one's own; a crashed host is restarted
 * like any other. Out of process, the plugin sees the environment as it
 * was when the shared client was made. A child of fork() makes its own.
 * Thread-safe. Since 0.1.
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
 * sbx_sandbox_detach:
 * Makes @sandbox detached (see sbx_options_set_detached()): it now outlives
 * every process that owns it, until sbx_sandbox_destroy() or the end of
 * its lifetime. A hand-off through session state to a later process (take
 * sbx_sandbox_session_state(), exit, sbx_resume() elsewhere) needs a
 * detached sandbox, or the sandbox is reaped by sbx_gc() in between. The
 * change is written to the lifecycle record at once. Errors:
 * invalid_argument (NULL), not_found (destroyed, or a sandbox the record
 * does not know: made by another user), configuration (the record cannot
 * be written, naming its path; or a sandbox without a lifetime,
 * SBX_TIMEOUT_NONE, which only its owners bound: contexts "option":
 * "timeout_secs" and "reason", and nothing changes). Thread-safe. Since
 * 0.1.
 */
SBX_EXPORT int sbx_sandbox_detach(sbx_sandbox *sandbox, sbx_error **error);

/**
 * sbx_sandbox_stop:
 * @sandbox: a sandbox (borrowed).
 * @error: (out) (optional): the failure.
 *
 * Stops the sandbox without destroying it, where the backend can: no
 * process in it runs, its files are kept, it runs no command until
 * sbx_sandbox_start() (an exec fails), and it can still be resumed from
 * its session state (in this or another process) to be started or
 * destroyed. Its lifetime is not extended: sbx_gc() reaps it by its
 * recorded expiry, stopped or not. On docker the container is paused
 * (docker pause: every process frozen, none ended; a real docker stop
 * would remove it, as it is made with AutoRemove), and
 * sbx_sandbox_is_alive() still says 1. Stopping a stopped sandbox
 * succeeds. Blocks for the call (at most the backend's API timeout).
 *
 * Returns: 0, or -1. Errors: invalid_argument (NULL, a destroyed handle),
 * feature_not_supported naming the backend where it cannot stop without
 * destroying (local, bubblewrap, safehouse), not_found (the sandbox is
 * gone), timeout, connection, and the provider's own. Thread-safe. Since
 * 0.1 (plugin ABI 1.2).
 */
SBX_EXPORT int sbx_sandbox_stop(sbx_sandbox *sandbox, sbx_error **error);

/**
 * sbx_sandbox_start:
 * Starts a sandbox that sbx_sandbox_stop() stopped: it runs commands again,
 * with the files it had (on docker its frozen processes go on). Starting a running
 * sandbox succeeds. Arguments, errors and thread safety as
 * sbx_sandbox_stop(). Since 0.1 (plugin ABI 1.2).
 */
SBX_EXPORT int sbx_sandbox_start(sbx_sandbox *sandbox, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* The lifecycle record and garbage collection                               */
/* ------------------------------------------------------------------------ */

/*
 * Every sandbox the library creates is first written to a per-user
 * lifecycle record, STATE_DIR/lifecycle.db (SQLite in WAL mode), where
 * STATE_DIR is $SBX_STATE_DIR, else $XDG_STATE_HOME/sbx, else
 * $HOME/.local/state/sbx: the create token, the backend, the expiry and
 * the creating process (pid and start time) as its first owner. The row is
 * completed with the provider's id and session state once the sandbox
 * exists, gains an owner for each process that resumes it (an attached
 * one: a detached sandbox does not end with its owners), and goes at
 * destroy. The directory and the database must belong to the user and not
 * be writable by group or others; they are made 0700 and 0600. A create
 * whose record cannot be written fails with configuration, naming the
 * path, before anything is made.
 */

/**
 * sbx_state_dir_path:
 * @error: (out) (optional): configuration when no base directory can be
 *   found (SBX_STATE_DIR, XDG_STATE_HOME and HOME all unset or empty, and
 *   the user has no home in the password database) or the path would not
 *   fit in PATH_MAX.
 *
 * The per-user state directory: $SBX_STATE_DIR when set and not empty,
 * else $XDG_STATE_HOME/sbx when XDG_STATE_HOME is absolute (the XDG Base
 * Directory rule), else $HOME/.local/state/sbx, HOME coming from the
 * password database of the effective user when unset. The lifecycle
 * record lives there, and the `sbx` command keeps its sandbox records in
 * its sandboxes/ directory. Nothing is made or checked.
 *
 * Returns: a new string the caller frees with free(), or NULL. Thread-safe
 * (reads the environment). Since 0.1.
 */
SBX_EXPORT char *sbx_state_dir_path(sbx_error **error);

/** Why sbx_gc() reports a sandbox. Values are fixed and append-only. */
typedef enum sbx_gc_reason {
    SBX_GC_EXPIRED = 1,     /* its lifetime (timeout_secs) has ended */
    SBX_GC_OWNER_GONE = 2,  /* attached, and every process that owned it has ended */
    SBX_GC_UNRECORDED = 3,  /* on the backend with this record's create token, but no row */
    SBX_GC_LIST_FAILED = 4  /* not a sandbox: the backend could not be listed (error says why) */
} sbx_gc_reason;

/**
 * sbx_gc_item: one thing sbx_gc() found, borrowed for the callback's
 * duration. For SBX_GC_LIST_FAILED only backend and error are set.
 */
typedef struct sbx_gc_item {
    const char *backend;       /* backend name */
    const char *id;            /* the provider's id ("" when the create never answered) */
    const char *create_token;  /* the create token ("" when unknown) */
    sbx_gc_reason reason;
    int reaped;                /* 1 when destroyed now; 0 in a dry run or on failure */
    const sbx_error *error;    /* why it could not be reaped or listed; NULL otherwise */
} sbx_gc_item;

/** sbx_gc() callback: return 0 to go on, non-zero to stop. */
typedef int (*sbx_gc_fn)(const sbx_gc_item *item, void *user_data);

/** sbx_gc() flag: report what would be reaped, touch nothing. */
#define SBX_GC_DRY_RUN 1u

/**
 * sbx_gc:
 * Reaps what should no longer exist: every recorded sandbox whose lifetime
 * has ended or that is attached and whose owners have all ended (resumed
 * from its session state and destroyed, or destroyed by id), and, on every
 * installed backend with SBX_CAP_LIST_OWNED, every sandbox that carries a
 * create token of this record but has no row (a create whose row was
 * lost); those backends are listed at once, a thread each, so one that
 * cannot be reached costs its own retries only. A sandbox without this
 * library's labels, or with another record's token (another user's), is
 * never touched. Rows go once their sandbox is gone. @fn (may be NULL) is
 * called in the calling thread, backends in their listing order, for
 * each sandbox found and for each backend that could not be listed. With
 * SBX_GC_DRY_RUN nothing is destroyed or removed. Returns the number of
 * sandboxes found (reaped, failed or, in a dry run, to reap), or -1 when
 * the record cannot be read. Errors: invalid_argument (unknown @flags),
 * configuration (the record: path, owner or mode). Thread-safe. Since 0.1.
 */
SBX_EXPORT int sbx_gc(unsigned flags, sbx_gc_fn fn, void *user_data, sbx_error **error);

/**
 * sbx_sandbox_free:
 * Frees the handle; a handle made by sbx_create() or sbx_resume() lets go
 * of the process-wide client it used, which stays for later ones (see
 * sbx_create()). Does NOT destroy the sandbox: a sandbox outlives its
 * handle until sbx_sandbox_destroy(), and its process too when it is
 * detached (see sbx_options_set_detached()). NULL ignored. Since 0.1.
 */
SBX_EXPORT void sbx_sandbox_free(sbx_sandbox *sandbox);

/**
 * sbx_sandbox_is_alive:
 * 1 when the sandbox exists and can run commands, 0 when it is gone
 * (destroyed, expired, its supervisor dead), -1 on an error deciding it.
 * Since 0.1.
 */
SBX_EXPORT int sbx_sandbox_is_alive(sbx_sandbox *sandbox, sbx_error **error);

/**
 * sbx_sandbox_snapshot:
 * Saves the sandbox's filesystem as a snapshot the provider keeps and
 * returns its id; sbx_options_set_snapshot_id() with that id creates new
 * sandboxes that start from it. The sandbox goes on running. On docker the
 * container is committed (paused for the commit) to an image in the
 * repository "sbx-snapshot", labelled with this library's backend label and
 * the container it came from; the id is the image id ("sha256:<64 hex>").
 * Backends with SBX_CAP_SNAPSHOT have it; local, bubblewrap and safehouse
 * do not. Returns a new string (free with free()) or NULL. Errors:
 * invalid_argument (NULL @sandbox), not_found after destroy or when the
 * provider no longer has the sandbox, feature_not_supported, timeout,
 * connection, and the provider's own. Thread-safe. Since 0.1.
 */
SBX_EXPORT char *sbx_sandbox_snapshot(sbx_sandbox *sandbox, sbx_error **error);

/**
 * sbx_owned_sandbox:
 * One sandbox that this library made on a backend, as
 * sbx_client_list_owned() reports it: found by the create token and labels
 * the library records with every sandbox at create, so it is found also
 * after the creating process is gone. Strings are borrowed for the
 * callback's duration only. Fields are only ever appended.
 */
typedef struct sbx_owned_sandbox {
    const char *id;           /* the provider's id; pass to sbx_client_destroy_by_id() */
    const char *create_token; /* the token recorded at create ("" when unknown) */
    double created_at;        /* UNIX seconds; 0 when unknown */
    double expires_at;        /* UNIX seconds the lifetime ends; 0 when none */
} sbx_owned_sandbox;

/** sbx_client_list_owned() callback: return 0 to go on, non-zero to stop. */
typedef int (*sbx_owned_fn)(const sbx_owned_sandbox *sandbox, void *user_data);

/**
 * sbx_client_list_owned:
 * Calls @fn (may be NULL: only count) once per sandbox this library made on
 * @client's backend that still exists there, running or stopped, in the
 * provider's order, in the calling thread. Resources without this
 * library's labels are never reported. Returns the number of sandboxes
 * reported (those whose callback stopped the walk included), or -1.
 * Backends with SBX_CAP_LIST_OWNED have it (docker: containers labelled
 * with the docker backend's label and a create token). Errors:
 * invalid_argument (NULL @client), feature_not_supported, timeout,
 * connection, and the provider's own. Thread-safe. Since 0.1.
 */
SBX_EXPORT int sbx_client_list_owned(sbx_client *client, sbx_owned_fn fn, void *user_data,
                                     sbx_error **error);

/**
 * sbx_client_destroy_by_id:
 * Destroys the sandbox @id (borrowed; an id from sbx_client_list_owned()
 * or sbx_sandbox_get0_id()) on @client's backend without a handle, as
 * sbx_sandbox_destroy() would. It refuses a resource that does not carry
 * this library's labels (invalid_argument naming the id), so it never
 * touches what the library did not make. A sandbox already gone is success
 * (0): destroying twice is safe. Returns 0 or -1. Errors: invalid_argument
 * (NULL @client, NULL or empty @id, an id that is not the backend's shape,
 * a resource without the labels), feature_not_supported, timeout,
 * connection, and the provider's own. Thread-safe. Since 0.1.
 */
SBX_EXPORT int sbx_client_destroy_by_id(sbx_client *client, const char *id,
                                        sbx_error **error);

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
/* Exposed ports                                                             */
/* ------------------------------------------------------------------------ */

/*
 * A sandbox's exposed ports are the TCP ports the library maps to an
 * endpoint this host can reach: those added with sbx_options_add_port()
 * at create, plus those sbx_sandbox_expose_port() added, minus those
 * sbx_sandbox_unexpose_port() removed. A port that is not exposed is never
 * resolved (not_found), whatever listens on it. Backends that have them
 * declare SBX_CAP_EXPOSED_PORTS (sbx_options_add_port() lists them).
 * The exposed ports live with the sandbox (docker: its published ports;
 * local and bubblewrap: its record; hosted: its session state), so a
 * resumed handle sees the same ones. A provider's access token for a
 * preview address is never part of an endpoint, a log line or an error.
 */

/**
 * sbx_sandbox_resolve_port:
 * Where this host connects to exposed port @port of @sandbox: a new string
 * the caller frees with free(), either "HOST:PORT" for a plain TCP
 * endpoint (docker "127.0.0.1:49153", local "127.0.0.1:8080") or an
 * "https://" URL for a provider's preview address (E2B
 * "https://8080-ID.e2b.app"). Errors: invalid_argument (NULL, a port out
 * of 1..65535, context port), not_found ("port N is not exposed", context
 * port; or the sandbox is gone), feature_not_supported naming the backend,
 * connection / timeout from the provider. Thread-safe. Since 0.1 (plugin
 * ABI 1.3).
 */
SBX_EXPORT char *sbx_sandbox_resolve_port(sbx_sandbox *sandbox, unsigned port,
                                          sbx_error **error);

/**
 * sbx_sandbox_list_ports:
 * The exposed ports of @sandbox, ascending: stores a new array (free())
 * of *@count ports in *@ports (NULL when there are none) and returns 0.
 * Errors: invalid_argument, not_found, feature_not_supported naming the
 * backend, connection / timeout. Thread-safe. Since 0.1 (plugin ABI 1.3).
 */
SBX_EXPORT int sbx_sandbox_list_ports(sbx_sandbox *sandbox, uint16_t **ports, size_t *count,
                                      sbx_error **error);

/**
 * sbx_sandbox_expose_port / sbx_sandbox_unexpose_port:
 * Adds @port (1..65535) to, or removes it from, the exposed ports of a
 * running sandbox. Exposing an exposed port, or unexposing one that is not
 * exposed, succeeds. Unexposing ends the library's mapping only: where the
 * provider keeps routing the port by itself (a preview address of E2B or
 * Tensorlake answers for any port its sandbox listens on) the address
 * itself stays reachable until the sandbox ends. docker fixes its
 * published ports at create: both are feature_not_supported there (declare
 * ports with sbx_options_add_port()); bubblewrap without the host's
 * network likewise. Errors: invalid_argument, not_found,
 * feature_not_supported naming the backend, connection / timeout.
 * Thread-safe. Since 0.1 (plugin ABI 1.3).
 */
SBX_EXPORT int sbx_sandbox_expose_port(sbx_sandbox *sandbox, unsigned port,
                                       sbx_error **error);
SBX_EXPORT int sbx_sandbox_unexpose_port(sbx_sandbox *sandbox, unsigned port,
                                         sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Exec                                                                      */
/* ------------------------------------------------------------------------ */

/* sbx_stream (which stream a chunk of output came from) is above, with
 * the creation options' progress reports. */

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
 *  - timeout_secs: > 0 a limit; 0 = what is left of the sandbox's
 *    lifetime (timeout_secs, counted from the create call; a resumed
 *    sandbox's timeout_secs from the exec's start), at least 1 s, and none
 *    for a sandbox without a lifetime (SBX_TIMEOUT_NONE); < 0 none.
 *    On expiry the command's whole process tree gets SIGTERM, then SIGKILL
 *    after SBX_KILL_GRACE_SECS; the result has timed_out = 1 and exit code
 *    124. A command not started by then never starts (backends that can
 *    tell: local, bubblewrap, safehouse); it is reported the same way,
 *    timed out with exit code 124 and no output. When the process that runs the
 *    sandbox's commands cannot be reached to end it (local, bubblewrap,
 *    safehouse: its supervisor stopped, as by SIGSTOP), the call fails
 *    instead, at most 2 s after the timeout, with a timeout error naming the
 *    sandbox and its supervisor, context "started" "no" (outcome failed:
 *    nothing ran, nothing will) or "unknown" (outcome unknown: the command
 *    may have run; its tree is ended once the supervisor runs again).
 *  - output_limit: bytes kept per stream; 0 = SBX_DEFAULT_OUTPUT_LIMIT.
 *    Output past it is read and dropped (the command never blocks on it)
 *    and the stream's truncated flag is set.
 *  - on_output / user_data: optional streaming callback.
 *  - flags: SBX_EXEC_NO_CAPTURE keeps nothing in the result (both buffers
 *    empty, not truncated): output only reaches on_output.
 *    SBX_EXEC_STDIN_OPEN (sbx_sandbox_start_process only): stdin stays open
 *    after stdin_data for sbx_process_write_stdin, until
 *    sbx_process_close_stdin (written bytes reach the running command as
 *    they are written on backends with SBX_CAP_EXEC_STDIN_STREAM; on the
 *    others, whole once stdin is closed). Unknown bits are
 *    invalid_argument.
 *  - tty_rows / tty_cols: > 0 both = the command runs on a
 *    pseudo-terminal of that size (rows and columns of characters,
 *    1..SBX_TTY_MAX), made inside the sandbox: it is the command's stdin,
 *    stdout, stderr and controlling terminal, so its output (both streams,
 *    merged by the terminal, with its line discipline's translations such
 *    as "\n" to "\r\n") comes as stdout only; stderr stays empty. stdin
 *    bytes are typed at the terminal (echoed, ^C is SIGINT, ^D the EOF
 *    character): stdin is never closed on its own; closing it
 *    (sbx_process_close_stdin) hangs the terminal up (SIGHUP). 0 both = no
 *    terminal. One 0 and not the other, or one too large, is
 *    invalid_argument. A backend without SBX_CAP_PTY refuses a terminal
 *    with feature_not_supported naming it.
 *  - user: the user the command runs as, a name or a numeric uid as the
 *    sandbox's own user database has it (docker also takes "USER:GROUP");
 *    NULL = the sandbox's default user (sbx_options_set_user when set at
 *    create, else docker: the image's USER). HOME is
 *    that user's home from the sandbox's passwd. Where the backend can run
 *    as another user: docker (the exec's User), e2b (envd's user), and
 *    local and bubblewrap only for the user their commands run as anyway
 *    (its name or uid; bubblewrap: the create-time user's uid inside the
 *    sandbox, and its name there); a user a backend cannot honour is refused with
 *    feature_not_supported naming the backend and the user (context
 *    user), never ignored. Empty, or holding whitespace or control
 *    characters: invalid_argument. Read only within struct_size (an older
 *    header has none).
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
    /* --- later fields: read only within struct_size (a caller built with an
     * older header gets none of them: no terminal) --- */
    unsigned tty_rows;
    unsigned tty_cols;
    const char *user;
} sbx_exec_request;

/** sbx_exec_request.flags bits. */
#define SBX_EXEC_NO_CAPTURE 1u
#define SBX_EXEC_STDIN_OPEN 2u

/** The largest terminal dimension (rows or columns), as struct winsize holds. */
#define SBX_TTY_MAX 65535u

#define SBX_EXEC_REQUEST_INIT { sizeof(sbx_exec_request), NULL, NULL, NULL, NULL, \
                                NULL, 0, 0.0, 0, NULL, NULL, 0, 0, 0, NULL }

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
 * back to python, as the reference does), "bash", "sh", "node"/"javascript",
 * and the languages the reference adds on Daytona: "typescript"/"ts"
 * (ts-node, with the CommonJS module option Daytona's code toolbox gives
 * it), "ruby" (ruby -e) and "go" (the code written to a main.go of its own
 * temporary directory under $TMPDIR, or /tmp, built with `go build` and
 * run, so the exit code is the program's; the directory is removed after).
 * These run on any backend whose image has the interpreter; a missing one
 * is a result with exit code 127, as for any program not found.
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
 * sbx_code_language_check:
 * Whether sbx_sandbox_execute_code() knows @language (NULL is python), so
 * that a caller can refuse a snippet before making a sandbox for it: 0, or
 * -1 with invalid_argument naming it (context "language"), the error
 * execute_code would give. No sandbox, no I/O; thread-safe. Since 0.1.
 */
SBX_EXPORT int sbx_code_language_check(const char *language, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Running processes                                                         */
/* ------------------------------------------------------------------------ */

/**
 * sbx_process:
 * A command started with sbx_sandbox_start_process() and not waited for:
 * the caller writes its stdin, resizes its terminal, reads its output
 * through the request's on_output callback (called from inside
 * sbx_process_wait), and waits for it, in a loop of its own if it likes
 * (sbx_process_get_fd). Calls on one process must not overlap (one thread
 * at a time); different processes are independent. The sandbox must
 * outlive it. Opaque; free with sbx_process_free().
 */
typedef struct sbx_process sbx_process;

/**
 * sbx_sandbox_start_process:
 * Starts @request (as execute_command; its on_output, output_limit and
 * flags included) and returns at once. With SBX_EXEC_STDIN_OPEN stdin
 * stays open (stdin_data, when set, comes first); without it, it ends
 * after stdin_data (or at once), as in execute_command; with a terminal it
 * stays open either way. The request's timeout applies from now (the
 * command gets SIGTERM, then SIGKILL, from within sbx_process_wait, which
 * then reports exit code 124). Errors: as execute_command, and
 * feature_not_supported (naming the backend) for a terminal on a backend
 * without SBX_CAP_PTY. The request's pointers are borrowed for this call,
 * except on_output / user_data, which stay in use until the process is
 * freed. Free the process with sbx_process_free(). Thread-safe as
 * execute_command. Since 0.1.
 */
SBX_EXPORT sbx_process *sbx_sandbox_start_process(sbx_sandbox *sandbox,
                                                  const sbx_exec_request *request,
                                                  sbx_error **error);

/**
 * sbx_process_write_stdin:
 * Queues @len bytes of @data (borrowed for the call; copied) for the
 * command's stdin and sends what the command takes now without waiting;
 * the rest goes out from sbx_process_wait, so a command that reads slowly
 * never blocks the caller. With a terminal the bytes are typed at it.
 * Bytes written after the command stopped reading are dropped. Returns 0;
 * -1 with invalid_argument when stdin is not open (no SBX_EXEC_STDIN_OPEN
 * and no terminal, or closed already) or @data is NULL with @len > 0,
 * resource_exhausted when out of memory. Since 0.1.
 */
SBX_EXPORT int sbx_process_write_stdin(sbx_process *process, const void *data, size_t len,
                                       sbx_error **error);

/**
 * sbx_process_close_stdin:
 * Ends stdin once the queued bytes are sent: the command reads EOF; with a
 * terminal, the terminal is hung up (SIGHUP to the command's session) as
 * when a terminal window closes: to send EOF to a program reading the
 * terminal, write its EOF character ("\x04") instead. Closing a closed
 * stdin is a no-op. Returns 0, or -1 with invalid_argument when stdin was
 * never open. Since 0.1.
 */
SBX_EXPORT int sbx_process_close_stdin(sbx_process *process, sbx_error **error);

/**
 * sbx_process_resize:
 * Sets the terminal's size to @rows x @cols (characters, each
 * 1..SBX_TTY_MAX); the command's foreground process group gets SIGWINCH
 * when it changed, and `stty size` shows it from then on. A process that
 * ended already: a no-op returning 0. Errors: invalid_argument (no
 * terminal, or a size out of range, naming it), connection / timeout from
 * the backend. Since 0.1.
 */
SBX_EXPORT int sbx_process_resize(sbx_process *process, unsigned rows, unsigned cols,
                                  sbx_error **error);

/**
 * sbx_process_wait:
 * Delivers the output that arrived to on_output, sends queued stdin, and
 * waits up to @timeout_secs (0 = do not wait, < 0 = until the command
 * ends) for the command's main process to end. Returns 1 when it ended
 * (then *@exit_code, if not NULL, is its code: 0..255, 128+N for signal
 * N, 124 for the request's timeout, as in a result; *@result, if not
 * NULL, gets a new result as execute_command would give: output kept,
 * flags, duration; free it with sbx_result_free()), 0 when it still runs,
 * -1 on error (NaN @timeout_secs is invalid_argument; the sandbox ended
 * is not_found; connection). Once it returned 1 it returns 1 again at
 * once with the same code (and a result each time it is asked for). Since
 * 0.2.
 */
SBX_EXPORT int sbx_process_wait(sbx_process *process, double timeout_secs, int *exit_code,
                                sbx_result **result, sbx_error **error);

/**
 * sbx_process_get_fd:
 * A descriptor that polls readable when sbx_process_wait(process, 0, ...)
 * has something to do: output arrived, the command ended, or queued stdin
 * can go out. Owned by the process (do not close or read it); valid until
 * sbx_process_free(). -1 when none could be made (poll with a short
 * timeout instead). Since 0.1.
 */
SBX_EXPORT int sbx_process_get_fd(sbx_process *process);

/**
 * sbx_process_kill:
 * Sends @signal (1..NSIG-1; SIGTERM, SIGKILL, SIGINT ...) to the
 * command's whole process tree (background descendants included).
 * Succeeds when it ended already. Errors: invalid_argument naming a bad
 * signal, connection / timeout from the backend. Since 0.1.
 */
SBX_EXPORT int sbx_process_kill(sbx_process *process, int signal, sbx_error **error);

/**
 * sbx_process_free:
 * Frees @process: a command still running is killed (its whole tree) and
 * every descriptor of it closed. NULL is a no-op. Since 0.1.
 */
SBX_EXPORT void sbx_process_free(sbx_process *process);

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
/**
 * sbx_result_is_oom_killed: 1 when the sandbox's memory limit killed a
 * process of the command while it ran, else 0 (also for NULL). The sign
 * is the sandbox cgroup's OOM-kill counter rising during the command
 * (cgroup v2 memory.events oom_kill, v1 memory.oom_control oom_kill), never
 * the exit code: `kill -9 $$` gives 137 without it. Bubblewrap reads the
 * counter when the command starts and ends. Docker reads it inside the
 * container after a command that ended with exit code 128 or more (an OOM
 * kill is a SIGKILL), against the previous read: the kills of children of
 * commands that exited below 128 count towards the next such command, and
 * the first such command after a resume only sets the baseline. The main process
 * killed so exits 137 (128 + SIGKILL); a killed child may leave any code.
 * The counter is the sandbox's: commands running at the same time in one
 * sandbox each see the other's kills. Backends without cgroup limits (local,
 * safehouse) never set it. When the whole sandbox ended by its memory
 * limit (docker: the container's main process was killed), the exec fails
 * instead: not_found, context reason=oom_killed, and later calls fail the
 * same way. Since 0.1.
 */
SBX_EXPORT int sbx_result_is_oom_killed(const sbx_result *result);
SBX_EXPORT int sbx_result_is_stdout_truncated(const sbx_result *result);
SBX_EXPORT int sbx_result_is_stderr_truncated(const sbx_result *result);
SBX_EXPORT double sbx_result_get_duration_secs(const sbx_result *result);

/** sbx_result_free: frees @result; NULL ignored. Since 0.1. */
SBX_EXPORT void sbx_result_free(sbx_result *result);

/* ------------------------------------------------------------------------ */
/* Files                                                                     */
/* ------------------------------------------------------------------------ */

/*
 * File calls take sandbox paths on every backend: on `local` they resolve
 * under the sandbox root ("/work/x" and "work/x" are ROOT/work/x), and a
 * path that escapes it (through "..", or a symlink that is absolute or
 * climbs above the root) is refused with invalid_argument, so nothing
 * outside the root is read or written; symlinks that stay inside are
 * followed. Names are bytes, taken literally (spaces, leading dashes, '+',
 * "%20", non-ASCII). Bytes move through descriptors with bounded memory
 * (a file over 2 GiB moves whole; only sbx_sandbox_read_file() holds a
 * file in memory, because it returns it). A backend without file slots
 * gets them built on exec (`cat`, `find`, `stat`, `tar` inside the
 * sandbox, paths passed as arguments, never spliced into a script).
 *
 * Permission bits are the 0777 bits: set-id and sticky bits, owners and
 * groups are not carried. File calls have no timeout. All are thread-safe:
 * several may run on one sandbox at once. Errors carry the backend, the op
 * ("list_files", "read_file", "write_file", "upload_file",
 * "download_file", "upload_dir", "download_dir", "extract_tar") and the
 * offending path as context "path" (or the archive entry as "entry").
 */

/** One entry of a directory listing. */
typedef struct sbx_file_info sbx_file_info;

/**
 * sbx_sandbox_list_files:
 * Lists directory @path (entries sorted bytewise by name, "." and ".."
 * left out). Stores a new array of @count entries in *@list (free with
 * sbx_file_info_list_free); on failure *@list is NULL and *@count 0.
 * Errors: not_found (path in context), invalid_argument (not a directory,
 * escaping path), feature_not_supported. Returns 0 or -1. Since 0.1.
 */
SBX_EXPORT int sbx_sandbox_list_files(sbx_sandbox *sandbox, const char *path,
                                      sbx_file_info ***list, size_t *count,
                                      sbx_error **error);
/** The entry's name (no directory part) and its sandbox path (@path of the
 *  listing joined with the name); borrowed from @info. */
SBX_EXPORT const char *sbx_file_info_get0_name(const sbx_file_info *info);
SBX_EXPORT const char *sbx_file_info_get0_path(const sbx_file_info *info);
/** 1 for a directory (a symlink to one is not), else 0. */
SBX_EXPORT int sbx_file_info_is_dir(const sbx_file_info *info);
/** Size in bytes (a symlink's own size; -1 when the backend cannot tell);
 *  permission bits (07777; 0 when unknown). */
SBX_EXPORT int64_t sbx_file_info_get_size(const sbx_file_info *info);
SBX_EXPORT uint32_t sbx_file_info_get_mode(const sbx_file_info *info);
/** Frees a listing and its entries; NULL ignored. */
SBX_EXPORT void sbx_file_info_list_free(sbx_file_info **list, size_t count);

/**
 * sbx_sandbox_read_file:
 * Reads the whole file @path into a new buffer stored in *@data (caller
 * frees with free(); NUL-terminated for convenience, binary-safe: use
 * *@len). For large files use sbx_sandbox_read_file_to_fd(). Errors:
 * not_found (path in context), invalid_argument (a directory, an escaping
 * path). Returns 0 or -1 (then *@data is NULL). Since 0.1.
 */
SBX_EXPORT int sbx_sandbox_read_file(sbx_sandbox *sandbox, const char *path,
                                     char **data, size_t *len, sbx_error **error);

/**
 * sbx_sandbox_read_file_to_fd:
 * Writes the bytes of @path to descriptor @fd (borrowed, left open; a
 * file, pipe or socket, blocking or not), in bounded memory, from @fd's
 * current position. A pipe or socket whose reader is gone is an error,
 * never a SIGPIPE in the caller. Errors as sbx_sandbox_read_file().
 * Returns 0 or -1. Since 0.1.
 */
SBX_EXPORT int sbx_sandbox_read_file_to_fd(sbx_sandbox *sandbox, const char *path,
                                           int fd, sbx_error **error);

/**
 * sbx_sandbox_write_file:
 * Creates or replaces @path with @len bytes of @data (borrowed; may be
 * NULL when @len is 0), mode 0644, creating missing parent directories.
 * On `local` the file is written beside and renamed into place, so a
 * failed write leaves the old content. Errors: invalid_argument (a
 * directory, an escaping path). Returns 0 or -1. Since 0.1.
 */
SBX_EXPORT int sbx_sandbox_write_file(sbx_sandbox *sandbox, const char *path,
                                      const void *data, size_t len,
                                      sbx_error **error);

/**
 * sbx_sandbox_list_files_as / sbx_sandbox_read_file_as /
 * sbx_sandbox_write_file_as:
 * As sbx_sandbox_list_files, sbx_sandbox_read_file and
 * sbx_sandbox_write_file, done as @user (a name or a numeric uid as
 * sbx_exec_request.user takes it): the sandbox checks that user's
 * permissions, and what the write creates (the file and any parent
 * directory it makes) belongs to that user and its group. @user NULL is
 * the plain call (the sandbox's default user). The call runs as a command
 * of @user in the sandbox (find, cat, mkdir, chmod), so a backend honours
 * it exactly where it runs commands as a chosen user: docker (any user of
 * the container's passwd, or a uid), e2b (envd's users), local and
 * bubblewrap only the user their commands run as. Any other user is
 * refused as exec refuses it (feature_not_supported naming the backend
 * and the user, context user; docker: execution_failed naming a user the
 * container lacks), and nothing is touched. Errors besides those of the
 * plain calls: invalid_argument for a malformed @user (context user);
 * execution_failed with the command's message when @user may not read or
 * write there (context path). Returns 0 or -1. Since 0.1.
 */
SBX_EXPORT int sbx_sandbox_list_files_as(sbx_sandbox *sandbox, const char *path,
                                         const char *user, sbx_file_info ***list,
                                         size_t *count, sbx_error **error);
SBX_EXPORT int sbx_sandbox_read_file_as(sbx_sandbox *sandbox, const char *path,
                                        const char *user, char **data, size_t *len,
                                        sbx_error **error);
SBX_EXPORT int sbx_sandbox_write_file_as(sbx_sandbox *sandbox, const char *path,
                                         const char *user, const void *data, size_t len,
                                         sbx_error **error);

/**
 * sbx_sandbox_write_file_from_fd:
 * Creates or replaces @path with the bytes read from @fd (borrowed, read to
 * EOF, left open) and permission bits @mode (e.g. 0644, 0755; at most
 * 07777, else invalid_argument), creating missing parent directories.
 * Returns 0 or -1. Since 0.1.
 */
SBX_EXPORT int sbx_sandbox_write_file_from_fd(sbx_sandbox *sandbox, const char *path,
                                              int fd, uint32_t mode,
                                              sbx_error **error);

/**
 * sbx_sandbox_upload_file / sbx_sandbox_download_file:
 * Copy one file between the host path @local_path and the sandbox path
 * @sandbox_path, keeping the content and the permission bits (the
 * executable bit in particular). Missing parent directories are created on
 * the receiving side. download_file writes a temporary file beside
 * @local_path and renames it into place (an existing file is replaced;
 * nothing is left behind on failure). Errors: not_found for a missing
 * source (path in context), invalid_argument (not a regular file, a
 * directory as destination). Return 0 or -1. Since 0.1.
 */
SBX_EXPORT int sbx_sandbox_upload_file(sbx_sandbox *sandbox, const char *local_path,
                                       const char *sandbox_path, sbx_error **error);
SBX_EXPORT int sbx_sandbox_download_file(sbx_sandbox *sandbox, const char *sandbox_path,
                                         const char *local_path, sbx_error **error);

/**
 * sbx_sandbox_upload_dir / sbx_sandbox_download_dir:
 * Copy a directory tree as one tar stream through libarchive (PAX headers:
 * long names and link targets, large sizes; permission bits; empty files
 * and directories; symlinks kept as symlinks, never followed). Sockets,
 * fifos and devices in a local tree are skipped, and so is a file that is
 * swapped for one (or for a symlink or another file) while the tree is
 * read: files are opened without blocking and must be what was listed, so
 * a tree that changes meanwhile never hangs the copy. The destination directory
 * is created when missing, with its parents (on the host, those the call
 * made are removed again on failure); entries merge into an existing one,
 * replacing files they meet.
 * On the way out of a sandbox every entry is checked as it is read and
 * extracted into a staging directory beside the destination (inside it
 * when the destination is another filesystem), resolving beneath it and
 * never through a symlink, and renamed or merged into place once the
 * whole stream was accepted: an absolute path, a ".." component, a hard
 * link to anything but an earlier entry, a device, fifo or socket, an
 * entry written through a symlink, or one past the extraction limits
 * (sbx_extract_options_set_limits; the message names the limit) is refused
 * with a workspace error naming the entry (context "entry"), and a refused
 * archive leaves the destination untouched (its staging directory is
 * removed). A symlink whose target is absolute or leaves the destination
 * (a virtualenv's bin/python) is kept as it is by default: extraction never
 * follows it and never writes through it (sbx_outside_symlinks for the
 * other choices). Modes are the entries' 0777 bits less the process's
 * umask (a 0666 file lands as 0644 under umask 022, a 0777 directory as
 * 0755), on both sides of upload_dir and download_dir on local. Runs of
 * zeros become holes. Return the number of entries copied (the root
 * itself and skipped entries not counted), or -1. Since 0.1.
 */
SBX_EXPORT int64_t sbx_sandbox_upload_dir(sbx_sandbox *sandbox, const char *local_dir,
                                          const char *sandbox_dir, sbx_error **error);
SBX_EXPORT int64_t sbx_sandbox_download_dir(sbx_sandbox *sandbox, const char *sandbox_dir,
                                            const char *local_dir, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Workspace persistence                                                     */
/* ------------------------------------------------------------------------ */

/** Persist / hydrate flag: the sandbox user's agent state goes too:
 *  ~/.claude/, ~/.claude.json and Codex's $CODEX_HOME (else ~/.codex). */
#define SBX_PERSIST_AGENT_HOME 1u

/**
 * sbx_sandbox_persist_workspace:
 * Writes directory @dir of @sandbox (a sandbox path; NULL = the sandbox's
 * working directory) to @fd (borrowed, blocking, left open: a file, a
 * pipe, a socket) as one tar stream, the same layout on every backend, so
 * that sbx_sandbox_hydrate_workspace() on any backend restores it:
 *   workspace/...        the directory's contents (PAX; entries sorted;
 *                        files, empty directories, symlinks as they are,
 *                        the 0777 mode bits, mtimes; owner 0)
 *   home/.claude/...     with SBX_PERSIST_AGENT_HOME, what exists of them
 *   home/.claude.json    in the home of the sandbox's default user
 *   home/.codex/...      ($CODEX_HOME when set, else ~/.codex)
 * The tree passes through a private temporary directory of this host
 * (under $TMPDIR), removed before the call returns; memory stays bounded.
 * Returns the number of entries written, or -1. Errors: invalid_argument
 * (NULL sandbox, unknown flags, a closed @fd, a relative @dir, @dir "/"
 * where the sandbox owns / (its whole system)), not_found (@dir missing),
 * workspace (the tree cannot be read or written), and the file calls'.
 * Thread-safe as the file calls. Since 0.1.
 */
SBX_EXPORT int64_t sbx_sandbox_persist_workspace(sbx_sandbox *sandbox, const char *dir,
                                                 unsigned flags, int fd, sbx_error **error);

/**
 * sbx_sandbox_hydrate_workspace:
 * Restores a stream made by sbx_sandbox_persist_workspace() (on any
 * backend), read from @fd to its end, into directory @dir of @sandbox
 * (NULL = its working directory; made when missing): afterwards @dir holds
 * exactly the stream's workspace/ entries (what it held before is
 * removed). With SBX_PERSIST_AGENT_HOME each agent part the stream holds
 * replaces the same part of the sandbox user's home; without it they are
 * left out. The whole stream is checked before the sandbox is touched
 * (through the checked extractor of sbx_extract_tar_fd(), symlinks
 * leaving the tree refused, then the layout: only workspace/ and the
 * agent parts of home/), then uploaded to a staging directory inside @dir,
 * and only then swapped in by renames: a stream that is not a tar, an
 * entry that escapes (absolute, "..", a symlink out, a hard link out),
 * an entry outside the layout, or an upload that fails leaves @dir exactly
 * as it was (the staging directory removed). Returns the number of
 * entries in the stream, or -1. Errors: workspace (naming the entry,
 * context "entry"), invalid_argument (as persist), and the file and exec
 * calls'. Thread-safe as the file calls; do not run commands that write
 * @dir meanwhile. Since 0.1.
 */
SBX_EXPORT int64_t sbx_sandbox_hydrate_workspace(sbx_sandbox *sandbox, const char *dir,
                                                 unsigned flags, int fd, sbx_error **error);

/**
 * sbx_outside_symlinks:
 * What the checked extractor (download_dir, sbx_extract_tar_fd) does with a
 * symlink whose target is absolute or leaves the destination (leading ".."
 * beyond the link's depth, or ".." after a name). In every case the
 * extractor never follows a symlink and refuses an entry written through
 * one. Values are explicit and append-only.
 */
typedef enum sbx_outside_symlinks {
    SBX_OUTSIDE_SYMLINKS_KEEP = 0,   /* made as it is (the default) */
    SBX_OUTSIDE_SYMLINKS_SKIP = 1,   /* left out; the note function is told */
    SBX_OUTSIDE_SYMLINKS_REFUSE = 2  /* the whole archive refused (workspace) */
} sbx_outside_symlinks;

/** The extraction limits when none are set: the apparent size of one file
 *  (a sparse entry counts whole), of all files together, in bytes; the
 *  number of entries (the root not counted). */
#define SBX_EXTRACT_DEFAULT_MAX_ENTRY_BYTES (INT64_C(64) << 30)   /* 64 GiB */
#define SBX_EXTRACT_DEFAULT_MAX_TOTAL_BYTES (INT64_C(256) << 30)  /* 256 GiB */
#define SBX_EXTRACT_DEFAULT_MAX_ENTRIES INT64_C(1000000)

/** Told about an entry the extractor left out: its name as in the archive
 *  and why (both borrowed for the call), on the extracting thread. */
typedef void (*sbx_extract_note_fn)(const char *entry, const char *message, void *user_data);

/** Choices for sbx_sandbox_download_dir_with_options() and
 *  sbx_extract_tar_fd_with_options(). Not thread-safe to change while a
 *  call uses it; calls only read it. */
typedef struct sbx_extract_options sbx_extract_options;

/** sbx_extract_options_new: a new set of defaults (KEEP, the default
 *  limits, no note function), freed with sbx_extract_options_free(); NULL
 *  when memory runs out. Since 0.1. */
SBX_EXPORT sbx_extract_options *sbx_extract_options_new(void);
/** sbx_extract_options_free: NULL ignored. Since 0.1. */
SBX_EXPORT void sbx_extract_options_free(sbx_extract_options *options);
/**
 * sbx_extract_options_set_limits:
 * The largest file in bytes (apparent size), all files together in bytes,
 * and the most entries an archive may create; 0 keeps a limit's default
 * (SBX_EXTRACT_DEFAULT_*). An archive past one is refused with a workspace
 * error naming the entry and the limit. Errors: invalid_argument for a
 * negative value (named). Returns 0 or -1. Since 0.1.
 */
SBX_EXPORT int sbx_extract_options_set_limits(sbx_extract_options *options,
                                              int64_t max_entry_bytes, int64_t max_total_bytes,
                                              int64_t max_entries, sbx_error **error);
/** sbx_extract_options_set_outside_symlinks: one of sbx_outside_symlinks;
 *  invalid_argument (the value named) otherwise. Returns 0 or -1. Since 0.1. */
SBX_EXPORT int sbx_extract_options_set_outside_symlinks(sbx_extract_options *options,
                                                        sbx_outside_symlinks how,
                                                        sbx_error **error);
/** sbx_extract_options_set_note_fn: @fn (NULL: none) is called with
 *  @user_data (borrowed) for each entry left out; a NULL @options is
 *  ignored. Since 0.1. */
SBX_EXPORT void sbx_extract_options_set_note_fn(sbx_extract_options *options,
                                                sbx_extract_note_fn fn, void *user_data);

/**
 * sbx_sandbox_download_dir_with_options:
 * sbx_sandbox_download_dir() with @options (borrowed for the call; NULL:
 * the defaults, as sbx_sandbox_download_dir; the async form
 * sbx_sandbox_download_dir_async() uses the defaults). Thread-safe as
 * download_dir. Since 0.1.
 */
SBX_EXPORT int64_t sbx_sandbox_download_dir_with_options(sbx_sandbox *sandbox,
                                                         const char *sandbox_dir,
                                                         const char *local_dir,
                                                         const sbx_extract_options *options,
                                                         sbx_error **error);

/**
 * sbx_extract_tar_fd:
 * The checked extractor that download_dir uses, for any tar stream from an
 * untrusted source (restore paths, archives made in a sandbox): reads an
 * uncompressed tar stream (ustar, PAX or GNU) from @fd (borrowed, blocking,
 * read to EOF, left open) and extracts it into the host directory
 * @dest_dir with the checks, staging and merging described above. Errors:
 * workspace (a refused entry, named in context "entry"; or not a tar
 * stream), invalid_argument (bad @fd, @dest_dir not a directory). Returns
 * the number of entries, or -1. Thread-safe. Since 0.1.
 */
SBX_EXPORT int64_t sbx_extract_tar_fd(int fd, const char *dest_dir, sbx_error **error);
/** sbx_extract_tar_fd() with @options (borrowed for the call; NULL: the
 *  defaults). Since 0.1. */
SBX_EXPORT int64_t sbx_extract_tar_fd_with_options(int fd, const char *dest_dir,
                                                   const sbx_extract_options *options,
                                                   sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Session state                                                             */
/* ------------------------------------------------------------------------ */

/**
 * sbx_sandbox_session_state:
 * A versioned JSON document from which sbx_sandbox_resume() reattaches to
 * this sandbox, in this or another process:
 * {"version":1,"backend":"local","id":"...","timeout_secs":600,
 *  "size":{"cpu":1,"memory_mb":1024},"data":{...}}
 * where data is the backend's own and size the cpu, memory_mb and gpu (when
 * one was asked for) the sandbox was created with, by which a resumed
 * sandbox's compute is priced (a document without size is priced at the
 * default size). It holds no secret: no credential and no environment
 * value. Returns a new string (free with free()) or NULL.
 *
 * Handing the sandbox on through a queue (take this document, let this
 * process exit, sbx_resume() it in another process later) needs a
 * DETACHED sandbox: sbx_options_set_detached() at create, or
 * sbx_sandbox_detach() before this process ends. An attached one (the
 * default) is destroyed once every process that created or resumed it
 * has ended without destroying it (who does that, and when, per plugin
 * mode and backend: sbx_options_set_detached()), so the other process
 * finds it gone (not_found) or reaped by sbx_gc() in between. A detached
 * sandbox lives until sbx_sandbox_destroy() or the end of its lifetime
 * (timeout_secs). "timeout_secs" is -1 for a sandbox without a lifetime
 * (SBX_TIMEOUT_NONE; always attached): only a process that resumes it
 * while one of its owners lives can take it over.
 * Errors: not_found after destroy, feature_not_supported. Thread-safe.
 * Since 0.1.
 */
SBX_EXPORT char *sbx_sandbox_session_state(sbx_sandbox *sandbox, sbx_error **error);

/**
 * sbx_sandbox_resume:
 * Reattaches to the sandbox described by @state_json (borrowed). The
 * resumed sandbox sees the same files and the same running background
 * processes. Errors: invalid_argument for a malformed document, a version
 * this library does not know, a backend other than @client's, or
 * "timeout_secs": -1 (no lifetime) for a backend without
 * SBX_CAP_OWNER_WATCH; not_found when the sandbox no longer exists (after
 * its lifetime: naming the expiry, on the backends that end it);
 * feature_not_supported. Since 0.1.
 */
SBX_EXPORT sbx_sandbox *sbx_sandbox_resume(sbx_client *client, const char *state_json,
                                           sbx_error **error);

/**
 * sbx_resume:
 * sbx_sandbox_resume() on the shared client of the backend named in
 * @state_json (see sbx_create()). The resuming process becomes an owner of
 * an attached sandbox in the lifecycle record (see
 * sbx_options_set_detached()); a detached one gains no owner.
 * Thread-safe. Since 0.1.
 */
SBX_EXPORT sbx_sandbox *sbx_resume(const char *state_json, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Money and pricing                                                         */
/* ------------------------------------------------------------------------ */

/*
 * Money is exact decimal, never a sum of binary floats: an amount is an
 * int64_t count of pico-dollars (10^-12 USD, SBX_PUSD_PER_USD to a dollar;
 * an int64_t holds up to about 9.2 million USD), a per-second rate a count
 * of femto-dollars (10^-15 USD) per second. Costs the agent CLIs report are
 * read from the exact decimal text of their JSON ("0.0070147"), added as
 * integers, and printed back exactly by sbx_usd_format() (CASE-41:
 * 0.0070147 + 0.0041023 prints "0.011117", not 0.011116999999999998).
 */
#define SBX_PUSD_PER_USD INT64_C(1000000000000)
/** Bytes sbx_usd_format() needs at most, the NUL included. */
#define SBX_USD_FORMAT_SIZE 32

/**
 * sbx_usd_format:
 * Prints @pusd pico-dollars as an exact decimal number of dollars, without
 * trailing zeros or exponent ("0.011117", "31.5", "0", "-0.25"), into @buf
 * (@cap bytes; SBX_USD_FORMAT_SIZE always suffices). Returns the length
 * written, or -1 when @buf is NULL or too small. Thread-safe. Since 0.1.
 */
SBX_EXPORT int sbx_usd_format(int64_t pusd, char *buf, size_t cap);

/**
 * sbx_usd_parse:
 * Reads the decimal number of dollars @text ("0.0070147", "31.5", "-2",
 * "1e-5": as JSON writes numbers) exactly into *@pusd pico-dollars, digits
 * past the 12th decimal rounded half away from zero. Errors:
 * invalid_argument naming @text when it is not such a number or does not
 * fit an int64_t of pico-dollars (-9223372.036854775808 to
 * 9223372.036854775807 dollars, the ends included: what sbx_usd_format()
 * prints reads back), or for NULL arguments. Returns 0 or -1.
 * Thread-safe. Since 0.1.
 */
SBX_EXPORT int sbx_usd_parse(const char *text, int64_t *pusd, sbx_error **error);

/*
 * The price table: one bundled data file, dated ("last_updated"), with an
 * entry per backend of the project: vcpu_usd_per_s or vcpu_usd_per_h,
 * ram_gib_usd_per_s or ram_gib_usd_per_h, gpu_usd_per_s (per GPU type, as
 * sbx_options_set_gpu names it), storage and free_tier (as the provider
 * words them), billing_granularity_s (0 = continuous), minimum_s,
 * source_url, read_on (the date the source was read) and notes. Rates are
 * the providers' list prices from the project's provider contracts; local,
 * bubblewrap, safehouse, docker, ray and kubernetes cost 0 unless the user
 * sets a rate. A rate given as null is not published: a cost that needs it
 * is unknown (an error here, null in usage), never 0.
 *
 * The bundled file is $(pkgdatadir)/pricing.json (the source tree's
 * pricing/pricing.json when the library runs uninstalled; the environment
 * variable SBX_PRICING_DATA names another). A user file is laid over it:
 * $SBX_PRICING_FILE, else $XDG_CONFIG_HOME/sbx/pricing.json (an absolute
 * XDG_CONFIG_HOME), else $HOME/.config/sbx/pricing.json, when it exists;
 * same format, each key of a backend's entry replacing the bundled one (a
 * rate per second replaces the bundled rate per hour, and the other way
 * round), new backends added. Each merged entry gains "origin": the file
 * that set it last. Files are read at each call (no cache).
 */

/**
 * sbx_cost_per_second:
 * What @vcpu vCPUs, @ram_gib GiB of memory and @gpu ("TYPE" or
 * "TYPE:COUNT" as sbx_options_set_gpu, NULL or "" for none) cost on
 * @backend per second, in femto-dollars (10^-15 USD) stored in
 * *@fusd_per_second: vcpu × the vCPU rate + ram_gib × the memory rate +
 * COUNT × the GPU type's rate (the reference's formula, plus GPUs), rounded
 * to the femto-dollar (exact for rates published per second with at most
 * 12 decimals, further ones being rounded to the pico-dollar when the
 * table is read; a rate per hour such as 0.05 is 13888888889). The granularity and minimum apply to
 * costs of a duration (usage), not here. Errors: invalid_argument (NULL
 * @fusd_per_second, empty @backend, a negative or non-finite size, a bad
 * @gpu), not_found naming the backend (no entry) or the rate it lacks (a
 * rate published as null, a GPU type without a rate), configuration naming
 * a pricing file that cannot be read. Returns 0 or -1. Thread-safe. Since
 * 0.1.
 */
SBX_EXPORT int sbx_cost_per_second(const char *backend, double vcpu, double ram_gib,
                                   const char *gpu, int64_t *fusd_per_second,
                                   sbx_error **error);

/**
 * sbx_cost_of_duration:
 * What @seconds of @vcpu vCPUs, @ram_gib GiB and @gpu (as
 * sbx_cost_per_second) cost on @backend, in pico-dollars (10^-12 USD)
 * stored in *@pusd: the seconds are first rounded up to the entry's
 * billing_granularity_s and raised to its minimum_s (a negative @seconds
 * counts as 0), then priced at the size's rate, rounded once to the
 * pico-dollar. This is how usage prices a sandbox's lifetime, so an
 * estimate made with it matches the ledger. Errors: as
 * sbx_cost_per_second, and invalid_argument for NULL @pusd, a non-finite
 * @seconds, or a cost past what an amount holds (about 9.2 million USD),
 * naming @seconds. Returns 0 or -1. Thread-safe. Since 0.1.
 */
SBX_EXPORT int sbx_cost_of_duration(const char *backend, double vcpu, double ram_gib,
                                    const char *gpu, double seconds, int64_t *pusd,
                                    sbx_error **error);

/**
 * sbx_pricing_get_entry:
 * The raw entry of @backend in the merged table, as a JSON object (new
 * string, free with free()), with its "origin". Errors: invalid_argument,
 * not_found naming the backend, configuration naming a file. Thread-safe.
 * Since 0.1.
 */
SBX_EXPORT char *sbx_pricing_get_entry(const char *backend, sbx_error **error);

/**
 * sbx_pricing_to_json:
 * The whole merged table as a JSON document (the bundled file's keys,
 * "backends" merged, "files": the files read, in order), new string, free
 * with free(). Errors: configuration naming a file. Thread-safe. Since 0.1.
 */
SBX_EXPORT char *sbx_pricing_to_json(sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Usage and the ledger                                                      */
/* ------------------------------------------------------------------------ */

/**
 * sbx_usage:
 * Tokens and money of agent calls and sandbox lifetimes: of one call
 * (sbx_agent_run_get_usage), the running total of a sandbox
 * (sbx_sandbox_get_usage) or of a client's sandboxes
 * (sbx_client_get_usage). A plain value; set struct_size (SBX_USAGE_INIT)
 * before a getter fills it: fields past it are left alone.
 *
 * Tokens follow the CLIs' own counts: input (not read from the cache),
 * output, reasoning (OpenCode's, Codex's reasoning_output_tokens taken out
 * of its output), cache_read and cache_write; a count that is not a JSON
 * integer >= 0 (negative, fractional, a string) counts 0. Money is in
 * pico-dollars; a reported cost that is not a decimal number >= 0 that
 * fits is not a cost (unknown). Sums of counts and money stop at
 * INT64_MAX instead of wrapping.
 *  - llm_cost_pusd: the sum of the costs the CLIs reported;
 *    llm_cost_unknown the number of calls whose CLI reported none (Codex
 *    never does; Claude Code under a subscription does not): with 0 the
 *    sum is the cost, otherwise it is only what is known (the JSON forms
 *    print null for a single call's unknown cost). A failed call that was
 *    paid for keeps its cost (CASE-41, CASE-56).
 *  - compute_seconds / compute_cost_pusd: the sandbox time of the agent
 *    calls (wall seconds of each call, × the backend's rate for the
 *    sandbox's size, billing granularity and minimum applied per call);
 *    compute_cost_unknown counts calls without a price (see
 *    sbx_cost_per_second).
 *  - sandboxes / sandbox_seconds / sandbox_cost_pusd: sandbox lifetimes
 *    (from the create or resume in this process to the destroy, or to the
 *    free of the handle), × the rate; for a sandbox, its own lifetime so
 *    far; sandbox_cost_unknown counts lifetimes without a price. The agent
 *    calls' compute is part of these lifetimes: the whole cost of a run is
 *    llm cost + sandbox cost (sbx_usage_total_cost), never + compute cost.
 */
typedef struct sbx_usage {
    size_t struct_size;
    int64_t calls;
    int64_t input_tokens;
    int64_t output_tokens;
    int64_t reasoning_tokens;
    int64_t cache_read_tokens;
    int64_t cache_write_tokens;
    int64_t llm_cost_pusd;
    int64_t llm_cost_unknown;
    double compute_seconds;
    int64_t compute_cost_pusd;
    int64_t compute_cost_unknown;
    int64_t sandboxes;
    double sandbox_seconds;
    int64_t sandbox_cost_pusd;
    int64_t sandbox_cost_unknown;
} sbx_usage;

#define SBX_USAGE_INIT { sizeof(sbx_usage), 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0, 0, 0, 0.0, 0, 0 }

/** sbx_usage_total_tokens: input + output + reasoning + cache_read +
 *  cache_write. 0 for NULL. Since 0.1. */
SBX_EXPORT int64_t sbx_usage_total_tokens(const sbx_usage *usage);

/**
 * sbx_usage_total_cost:
 * llm_cost_pusd + sandbox_cost_pusd (for one call, whose usage has no
 * lifetime: + compute_cost_pusd) into *@pusd. Returns 1 when every part is
 * known, 0 when a part is unknown (*@pusd is then the known part), -1 for
 * NULL arguments. Since 0.1.
 */
SBX_EXPORT int sbx_usage_total_cost(const sbx_usage *usage, int64_t *pusd);

/**
 * sbx_usage_to_json:
 * @usage as a JSON object (new string, free()): every field under its own
 * name, money as exact decimal numbers of dollars named *_usd instead of
 * *_pusd (a single call's unknown cost as null), plus total_tokens and
 * total_cost_usd (null when a part is unknown and @usage is one call).
 * NULL only when memory runs out. Since 0.1.
 */
SBX_EXPORT char *sbx_usage_to_json(const sbx_usage *usage);

/**
 * sbx_sandbox_get_usage / sbx_client_get_usage:
 * The running total of the agent calls made on @sandbox, with its
 * lifetime so far; or of every sandbox made or resumed on @client (calls,
 * and lifetimes: ended ones whole, live ones so far), into *@usage (its
 * struct_size set by the caller). Readable at any time, from any thread.
 * Returns 0, or -1 (invalid_argument for NULL arguments). Since 0.1.
 */
SBX_EXPORT int sbx_sandbox_get_usage(sbx_sandbox *sandbox, sbx_usage *usage,
                                     sbx_error **error);
SBX_EXPORT int sbx_client_get_usage(sbx_client *client, sbx_usage *usage,
                                    sbx_error **error);

/**
 * sbx_client_set_ledger:
 * Appends one JSON line to the file @path (made 0600 when missing; NULL
 * stops) for each agent call and each sandbox lifetime of @client's
 * sandboxes, from now on. Without a call the environment variable
 * SBX_LEDGER, read when the client is made, names the file, so every
 * process of a large run can write one ledger (a file it names that
 * cannot be opened fails the client's creation: configuration naming it). Each line is one write to
 * a file opened O_APPEND, so lines of concurrent writers never mix.
 *
 * Records: {"kind":"agent_call", "time" (ISO 8601 UTC), "backend",
 * "sandbox_id", "harness", "model", "status", "reason", "exit_code",
 * "session_id", "vcpu", "ram_gib", "gpu", "seconds", "rate_usd_per_s",
 * "rate_source", the token counts, "llm_cost_usd", "compute_cost_usd"} and
 * {"kind":"sandbox", "time", "backend", "sandbox_id", "end" ("destroyed" or
 * "released"), "vcpu", "ram_gib", "gpu", "seconds", "billed_seconds",
 * "rate_usd_per_s", "rate_source", "agent_calls", the token counts,
 * "llm_cost_usd", "llm_cost_unknown_calls", "compute_cost_usd"}; money as
 * exact decimal numbers, null when unknown. The cost of a whole run is the
 * sum of llm_cost_usd over the agent_call records plus compute_cost_usd
 * over the sandbox records (an agent call's compute is inside its
 * sandbox's lifetime). A write that fails is logged (SBX_DEBUG) and
 * dropped; it never fails the call it records. Errors: invalid_argument
 * (NULL @client), configuration naming @path when it cannot be opened.
 * Returns 0 or -1. Thread-safe. Since 0.1.
 */
SBX_EXPORT int sbx_client_set_ledger(sbx_client *client, const char *path,
                                     sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Agents                                                                    */
/* ------------------------------------------------------------------------ */

/**
 * sbx_agent_harness: the agent CLI run_agent runs. Values are explicit
 * and append-only.
 *  - CLAUDE_CODE: `claude -p --output-format json [--model M] [-c |
 *    --resume ID] [EXTRA...] -- PROMPT`; read from its result record (one
 *    object, the verbose array, or stream-json lines).
 *  - CODEX: `codex exec --json [--model M] [EXTRA...] [resume (--last |
 *    ID)] -- PROMPT`; read from its JSONL events.
 *  - OPENCODE: `opencode run --format json [--model M] [-c | --session
 *    ID] [EXTRA...] -- PROMPT`; read from its JSONL events.
 * The prompt always comes last, after "--": one that starts with "-" is
 * the prompt, never an option of the CLI.
 */
typedef enum sbx_agent_harness {
    SBX_AGENT_CLAUDE_CODE = 1,
    SBX_AGENT_CODEX = 2,
    SBX_AGENT_OPENCODE = 3
} sbx_agent_harness;

/** sbx_agent_harness_name: "claude-code", "codex", "opencode"; NULL for
 *  another value. Static. Since 0.1. */
SBX_EXPORT const char *sbx_agent_harness_name(sbx_agent_harness harness);
/** sbx_agent_harness_from_name: the harness named @name, or 0. Since 0.1. */
SBX_EXPORT sbx_agent_harness sbx_agent_harness_from_name(const char *name);

/**
 * sbx_agent_request:
 * One agent call. Initialise with SBX_AGENT_REQUEST_INIT, then set:
 *  - harness: which CLI (default claude-code).
 *  - prompt: the prompt, required, passed as one argument (never through a
 *    shell).
 *  - model: NULL = the CLI's default.
 *  - resume: NULL = a new conversation; "" = continue the last one
 *    (claude -c, codex resume --last, opencode -c); else the session or
 *    thread id to resume (claude --resume ID, codex resume ID, opencode
 *    --session ID), as sbx_agent_run_get0_session_id returns it.
 *  - extra_args: more arguments for the CLI, NULL-terminated (may be NULL).
 *  - env: "KEY=VALUE" for the call, NULL-terminated: the agent's
 *    credentials (ANTHROPIC_API_KEY, OPENAI_API_KEY, ...) reach the sandbox
 *    only this way or through the sandbox's own environment, never from
 *    this process's (CASE-48).
 *  - cwd: sandbox directory to run in (NULL: the sandbox's workdir).
 *  - timeout_secs: as sbx_exec_request's.
 *  - command: the CLI program (NULL: "claude", "codex", "opencode", looked
 *    up in the sandbox's PATH).
 * Pointers are borrowed for the call. A struct_size that does not reach
 * prompt is invalid_argument naming it.
 */
typedef struct sbx_agent_request {
    size_t struct_size;
    sbx_agent_harness harness;
    const char *prompt;
    const char *model;
    const char *resume;
    const char *const *extra_args;
    const char *const *env;
    const char *cwd;
    double timeout_secs;
    const char *command;
} sbx_agent_request;

#define SBX_AGENT_REQUEST_INIT { sizeof(sbx_agent_request), SBX_AGENT_CLAUDE_CODE, \
                                 NULL, NULL, NULL, NULL, NULL, NULL, 0.0, NULL }

/** The outcome of a finished agent call. */
typedef struct sbx_agent_run sbx_agent_run;

/** sbx_agent_status: values explicit and append-only. */
typedef enum sbx_agent_status {
    SBX_AGENT_SUCCEEDED = 1,
    SBX_AGENT_FAILED = 2
} sbx_agent_status;

/**
 * sbx_sandbox_run_agent:
 * Runs the agent CLI of @request in @sandbox, waits for it, and returns
 * what it answered and what it cost. The status comes from the CLI's own
 * status fields, never from matching the text and never from the exit code
 * alone:
 *  - Claude Code succeeds only when its result record has is_error false
 *    and subtype "success" (CASE-56) and the exit code is 0;
 *  - Codex succeeds only with a turn.completed event and no turn.failed
 *    (an error event, such as a reconnect notice, fails the run only when
 *    no turn completed; a stream cut short before its terminal event
 *    fails, even with exit code 0); its input_tokens include the cached
 *    ones, which are counted as cache_read only;
 *  - OpenCode succeeds with a step_finish after its last step_start and no
 *    error event; step_finish records are summed once each (by part id).
 * A failed run has a reason (sbx_agent_run_get0_reason) and an error kind
 * (sbx_agent_run_get_error_code: rate_limited, authentication, timeout,
 * command_failed); its answer text is NULL, its tokens and reported cost
 * are kept. A cost the CLI did not report is unknown, never 0.
 * The call's usage (with its compute cost: its wall time × the backend's
 * rate for the sandbox's size) is added to the sandbox's and its client's
 * and written to the client's ledger (sbx_client_set_ledger).
 *
 * Errors (NULL returned; nothing is added to any usage): invalid_argument
 * (NULL @sandbox or @request, no prompt, an unknown harness, a bad env
 * key); command_failed, with contexts "exit_code", "stdout" and "stderr"
 * (their tails), when the CLI is missing (exit code 127), or its output
 * holds none of the harness's JSON records (a non-zero exit without them
 * included); timeout when the call timed out before any record came; and
 * the errors of sbx_sandbox_execute_command. Thread-safe as exec. Free the
 * run with sbx_agent_run_free(). Since 0.1.
 */
SBX_EXPORT sbx_agent_run *sbx_sandbox_run_agent(sbx_sandbox *sandbox,
                                                const sbx_agent_request *request,
                                                sbx_error **error);

/** sbx_agent_run_get_status: SBX_AGENT_SUCCEEDED or SBX_AGENT_FAILED
 *  (FAILED for NULL). Since 0.1. */
SBX_EXPORT sbx_agent_status sbx_agent_run_get_status(const sbx_agent_run *run);
/** sbx_agent_run_get0_text: the answer of a succeeded run (Claude's
 *  result, Codex's last agent message, OpenCode's last text part); NULL
 *  for a failed run. Borrowed. Since 0.1. */
SBX_EXPORT const char *sbx_agent_run_get0_text(const sbx_agent_run *run);
/**
 * sbx_agent_run_get0_reason: why a run failed, NULL for a success.
 * Claude: "SUBTYPE" plus ": " and the errors or the result text when there
 * are any ("error_max_turns", "success with is_error true: API Error: Rate
 * limit reached"); Codex: "turn.failed: MESSAGE", "error: MESSAGE" or "no
 * terminal event"; OpenCode: "error: NAME: MESSAGE" or "no step_finish
 * after the last step_start"; "exit code N" when only the exit code says
 * so; "timed out" when the call's timeout ended it. Borrowed. Since 0.1.
 */
SBX_EXPORT const char *sbx_agent_run_get0_reason(const sbx_agent_run *run);
/**
 * sbx_agent_run_get_error_code: the kind of a failure, from the CLI's
 * structured fields (an API error status 429 or error "rate_limit":
 * rate_limited, retryable; 401 or 403, "authentication_failed",
 * "oauth_org_not_allowed": authentication; Claude's "API Error: Rate
 * limit" result with no status: rate_limited); timeout; command_failed
 * otherwise. 0 for a success. Since 0.1.
 */
SBX_EXPORT sbx_error_code sbx_agent_run_get_error_code(const sbx_agent_run *run);
/** The session (Claude, OpenCode) or thread (Codex) id, for resume; NULL
 *  when the CLI gave none. Borrowed. Since 0.1. */
SBX_EXPORT const char *sbx_agent_run_get0_session_id(const sbx_agent_run *run);
/** The CLI's exit code, kept as its own field (0..255, 128+N, 124). */
SBX_EXPORT int sbx_agent_run_get_exit_code(const sbx_agent_run *run);
/** The CLI's raw stdout and stderr (binary-safe; lengths in *@len).
 *  Borrowed. Since 0.1. */
SBX_EXPORT const char *sbx_agent_run_get0_stdout(const sbx_agent_run *run, size_t *len);
SBX_EXPORT const char *sbx_agent_run_get0_stderr(const sbx_agent_run *run, size_t *len);
/** sbx_agent_run_get_usage: the call's usage into *@usage (struct_size
 *  set by the caller). Returns 0, -1 for NULL. Since 0.1. */
SBX_EXPORT int sbx_agent_run_get_usage(const sbx_agent_run *run, sbx_usage *usage);
/**
 * sbx_agent_run_to_json:
 * {"status": "succeeded"|"failed", "reason", "error_code", "text",
 * "session_id", "exit_code", "harness", "usage": sbx_usage_to_json} as a
 * new string (free()); NULL only when memory runs out. Bytes of the CLI's
 * text that are not UTF-8 become U+FFFD here and in the ledger (the
 * getters and the raw output keep them). Since 0.1.
 */
SBX_EXPORT char *sbx_agent_run_to_json(const sbx_agent_run *run);
/** sbx_agent_run_free: NULL ignored. Since 0.1. */
SBX_EXPORT void sbx_agent_run_free(sbx_agent_run *run);

/*
 * Agent specs (the reference's AgentSpec): an agent placed inside the
 * sandbox is a command run there with the prompt; one placed outside is
 * the caller's own code, given a context whose calls reach the sandbox
 * only through the capabilities granted. Placement stays explicit.
 */

/** Capabilities of an agent context; values fixed, new bits appended. */
#define SBX_AGENT_CAP_SHELL     (1u << 0)  /* sbx_agent_context_shell */
#define SBX_AGENT_CAP_FILES     (1u << 1)  /* list_files, read_file, write_file */
#define SBX_AGENT_CAP_PATCH     (1u << 2)  /* apply_patch */
#define SBX_AGENT_CAP_PORTS     (1u << 3)  /* resolve_port, list_ports, expose_port, unexpose_port */
#define SBX_AGENT_CAP_ARTIFACTS (1u << 4)  /* reserved: no context call uses it yet */
#define SBX_AGENT_CAP_ALL       ((1u << 5) - 1)
/** The reference's default grant: shell and files. */
#define SBX_AGENT_CAP_DEFAULT   (SBX_AGENT_CAP_SHELL | SBX_AGENT_CAP_FILES)

/** sbx_agent_capability_name: "shell", "files", "patch", "ports",
 *  "artifacts"; NULL when @cap is not exactly one of them. Static. Since
 *  0.1. */
SBX_EXPORT const char *sbx_agent_capability_name(unsigned cap);

/** A sandbox as an agent may use it: every call checked against the
 *  capabilities granted. */
typedef struct sbx_agent_context sbx_agent_context;

/**
 * sbx_sandbox_agent_tools:
 * A context over @sandbox (borrowed: it must outlive the context) granting
 * @capabilities (SBX_AGENT_CAP_* bits), to hand to any agent framework as
 * its tools: the calls below act on the sandbox as the sbx_sandbox_* call
 * of the same name does, and a call whose capability was not granted
 * fails with feature_not_supported naming it (context "capability"),
 * touching nothing. Errors: invalid_argument (NULL @sandbox, unknown
 * bits), not_found after destroy. Free with sbx_agent_context_free(). A
 * context may be used from several threads as its sandbox can. Since 0.1.
 */
SBX_EXPORT sbx_agent_context *sbx_sandbox_agent_tools(sbx_sandbox *sandbox,
                                                      unsigned capabilities,
                                                      sbx_error **error);
/** The capabilities granted (0 for NULL). Since 0.1. */
SBX_EXPORT unsigned sbx_agent_context_get_capabilities(const sbx_agent_context *ctx);
/** sbx_agent_context_free: NULL ignored; the sandbox is left alone. */
SBX_EXPORT void sbx_agent_context_free(sbx_agent_context *ctx);

/** shell (SBX_AGENT_CAP_SHELL): @script run with /bin/sh -c, @timeout_secs
 *  as sbx_exec_request's; the result as sbx_sandbox_execute_shell's.
 *  Since 0.1. */
SBX_EXPORT sbx_result *sbx_agent_context_shell(sbx_agent_context *ctx, const char *script,
                                               double timeout_secs, sbx_error **error);
/** list_files / read_file / write_file (SBX_AGENT_CAP_FILES): as the
 *  sbx_sandbox_* calls. Since 0.1. */
SBX_EXPORT int sbx_agent_context_list_files(sbx_agent_context *ctx, const char *path,
                                            sbx_file_info ***list, size_t *count,
                                            sbx_error **error);
SBX_EXPORT int sbx_agent_context_read_file(sbx_agent_context *ctx, const char *path,
                                           char **data, size_t *len, sbx_error **error);
SBX_EXPORT int sbx_agent_context_write_file(sbx_agent_context *ctx, const char *path,
                                            const void *data, size_t len, sbx_error **error);
/** apply_patch (SBX_AGENT_CAP_PATCH): as sbx_sandbox_apply_patch. Since 0.1. */
SBX_EXPORT int sbx_agent_context_apply_patch(sbx_agent_context *ctx, const char *patch,
                                             size_t len, int strip, const char *dir,
                                             sbx_error **error);

/**
 * resolve_port / list_ports / expose_port / unexpose_port
 * (SBX_AGENT_CAP_PORTS): as the sbx_sandbox_* calls of the same name
 * (exposed ports, plugin ABI 1.3): an agent that starts a server in the
 * sandbox learns where the host reaches it, and may add or withdraw ports
 * where the backend can. The returned string and array are the caller's
 * to free(). Errors: feature_not_supported naming "ports" (context
 * "capability") when not granted, touching nothing; otherwise those of the
 * sandbox call. Since 0.1.
 */
SBX_EXPORT char *sbx_agent_context_resolve_port(sbx_agent_context *ctx, unsigned port,
                                                sbx_error **error);
SBX_EXPORT int sbx_agent_context_list_ports(sbx_agent_context *ctx, uint16_t **ports,
                                            size_t *count, sbx_error **error);
SBX_EXPORT int sbx_agent_context_expose_port(sbx_agent_context *ctx, unsigned port,
                                             sbx_error **error);
SBX_EXPORT int sbx_agent_context_unexpose_port(sbx_agent_context *ctx, unsigned port,
                                               sbx_error **error);

/**
 * sbx_outside_agent_fn:
 * An agent outside the sandbox: given @ctx (valid for the call only),
 * @prompt and @user_data, it works through @ctx and stores its answer, a
 * malloc()ed string, in *@answer (may be left NULL: ""). Returns 0, or
 * non-zero with *@error set (an error from a context call may be passed
 * on as it is).
 */
typedef int (*sbx_outside_agent_fn)(sbx_agent_context *ctx, const char *prompt,
                                    void *user_data, char **answer, sbx_error **error);

/**
 * sbx_sandbox_run_outside_agent:
 * Runs @fn with a context over @sandbox granting @capabilities (see
 * sbx_sandbox_agent_tools) and returns its answer (free with free()), or
 * NULL with its error (execution_failed when it gave none), the context
 * freed either way. Errors: those of agent_tools, invalid_argument (NULL
 * @fn), and @fn's. Thread-safe as the context. Since 0.1.
 */
SBX_EXPORT char *sbx_sandbox_run_outside_agent(sbx_sandbox *sandbox, unsigned capabilities,
                                               sbx_outside_agent_fn fn, const char *prompt,
                                               void *user_data, sbx_error **error);

/** How an inside agent gets its prompt. Values explicit, append-only. */
typedef enum sbx_agent_input {
    SBX_AGENT_INPUT_STDIN = 1,   /* on the command's stdin, then EOF */
    SBX_AGENT_INPUT_ARGV = 2,    /* as the command's last argument */
    SBX_AGENT_INPUT_FILE = 3,    /* in the file input_path, named by $SBX_AGENT_INPUT
                                  * (a sandbox path: on local, under $SANDBOX_ROOT) */
    SBX_AGENT_INPUT_NONE = 4     /* not at all */
} sbx_agent_input;

/** The reference's default input_path. */
#define SBX_AGENT_INPUT_PATH "/tmp/agent-input.txt"

/**
 * sbx_inside_agent:
 * An agent inside the sandbox. Initialise with SBX_INSIDE_AGENT_INIT.
 *  - command: a shell command (run as `/bin/sh -c COMMAND`), required.
 *  - input: how the prompt reaches it (default stdin). With argv it is
 *    passed as an argument ("$@" after the command), never spliced into
 *    the script.
 *  - input_path: the sandbox file of file input (default
 *    SBX_AGENT_INPUT_PATH), removed again after the call.
 *  - cwd, env ("KEY=VALUE", NULL-terminated), timeout_secs: as
 *    sbx_exec_request's.
 */
typedef struct sbx_inside_agent {
    size_t struct_size;
    const char *command;
    sbx_agent_input input;
    const char *input_path;
    const char *cwd;
    const char *const *env;
    double timeout_secs;
} sbx_inside_agent;

#define SBX_INSIDE_AGENT_INIT { sizeof(sbx_inside_agent), NULL, SBX_AGENT_INPUT_STDIN, \
                                NULL, NULL, NULL, 0.0 }

/**
 * sbx_sandbox_run_inside_agent:
 * Runs @spec's command in @sandbox with @prompt (may be NULL only with
 * SBX_AGENT_INPUT_NONE) and returns its result, as execute_command does
 * (the command's failure is its exit code). Errors: invalid_argument (no
 * command, no prompt, an unknown input mode), the errors of write_file
 * (file input) and execute_command. Thread-safe as exec. Since 0.1.
 */
SBX_EXPORT sbx_result *sbx_sandbox_run_inside_agent(sbx_sandbox *sandbox,
                                                    const sbx_inside_agent *spec,
                                                    const char *prompt, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Structured output                                                         */
/* ------------------------------------------------------------------------ */

/* A json-c value (<json-c/json.h>); the caller includes json-c to use it. */
struct json_object;

/**
 * sbx_json_extract:
 * The JSON object or array in @len bytes of @text (borrowed), searched as
 * the reference's return_type parsing does: the whole text (white space
 * around it allowed), then each fenced block (``` or ```json ... ```) in
 * order, then each balanced {...} from left to right (braces inside JSON
 * strings skipped); the first that parses wins. Scalars are not answers.
 * Returns a new json-c object (release with json_object_put()), or NULL:
 * invalid_argument (NULL @text; no JSON found: the message names the
 * length and the first 80 bytes). Thread-safe. Since 0.1.
 */
SBX_EXPORT struct json_object *sbx_json_extract(const char *text, size_t len,
                                                sbx_error **error);

/**
 * sbx_result_get_json:
 * sbx_json_extract() on the stdout of a command that exited 0 (the
 * reference's rule: exit code != 0 raises CommandFailedError). Errors:
 * invalid_argument (NULL @result), command_failed, with contexts
 * "exit_code", "stdout" and "stderr" (their last 2048 bytes), for a
 * non-zero exit code or an output without JSON. Thread-safe. Since 0.1.
 */
SBX_EXPORT struct json_object *sbx_result_get_json(const sbx_result *result,
                                                   sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Patches                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * sbx_sandbox_apply_patch:
 * Applies the unified diff in @len bytes of @patch (borrowed; `diff -u`,
 * `git diff`: other lines between files are ignored) to files of
 * @sandbox: each file's paths have @strip leading components removed
 * (patch -pN; the reference's apply_patch(patch, strip)) and are taken
 * under the sandbox directory @dir (NULL: as the file calls take them).
 * A file from /dev/null is created (0644; it must not exist), one to
 * /dev/null removed (its whole content must be the hunk's), any other
 * changed keeping its permission bits. Each hunk must match the file's
 * lines exactly (no fuzz), at the line its header names or the nearest
 * one after the previous hunk. All or nothing: every hunk of every file is
 * matched before any file is written, so a patch that does not apply
 * changes no file; and should a write then fail, the files written before
 * it are put back as they were (best effort: context "not_restored" names
 * a file that could not be). The file calls move the bytes (no patch
 * program is needed in the sandbox). Returns the number of files changed,
 * or -1.
 * Errors: invalid_argument (NULL @patch, negative @strip, a malformed
 * patch naming the line, a hunk that does not apply: "hunk 2 of src/a.c
 * (@@ -10,4 +10,5 @@) does not apply", contexts "path", "hunk" (its number
 * in the file) and "hunk_header"; a file to create that exists), the
 * errors of the file calls (not_found naming a file to change that does
 * not exist), not_found after destroy. Thread-safe as the file calls; not
 * atomic against other writers of the same files. Since 0.1.
 */
SBX_EXPORT int sbx_sandbox_apply_patch(sbx_sandbox *sandbox, const char *patch, size_t len,
                                       int strip, const char *dir, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Asynchronous calls                                                        */
/* ------------------------------------------------------------------------ */

/*
 * Every call above that may block on a backend or a sandbox (clients,
 * sandboxes, exec, files, session state, tar extraction) has an
 * asynchronous form, named after it with the suffix _async, for programs
 * built around an event loop (poll, epoll, libuv, ...) or that run many
 * sandboxes at once from one thread; calls that only read local
 * configuration (options, presets, sbx_backends_list, pricing) have none,
 * and neither have, yet, the agent specs' calls (sbx_sandbox_agent_tools'
 * context, sbx_sandbox_run_inside_agent, sbx_sandbox_run_outside_agent). An
 * sbx_async is a pool of worker threads: an _async call copies its
 * arguments into a new operation (sbx_op), queues it and returns at once;
 * a worker runs the synchronous call; the operation's completion callback
 * then runs in the application's own thread, the one that calls
 * sbx_async_dispatch(), never on a worker:
 *
 *   sbx_async *async = sbx_async_new(0, &error);
 *   sbx_create_async(async, "local", NULL, on_created, ctx, &error);
 *   for (;;) {                    (or add sbx_async_get_fd() to a loop)
 *       struct pollfd p = { sbx_async_get_fd(async), POLLIN, 0 };
 *       poll(&p, 1, -1);
 *       sbx_async_dispatch(async);
 *   }
 *
 * Behaviour and errors are those of the synchronous call, which is what
 * runs (its documentation above applies); the outcome reaches the callback
 * through the sbx_op accessors below instead of return values.
 *
 * Arguments: strings, argv and env vectors, stdin bytes, file data and
 * options are copied at submission, so the caller may free its own as soon
 * as the _async call returns (a workspace manifest set in the options is
 * shared by reference, as sbx_options_set_workspace() does: add no entries
 * to it until the operation completed). Handles (sbx_async, sbx_client,
 * sbx_sandbox) and descriptors are borrowed: they must stay valid (and a
 * descriptor open) until the operation's callback has returned. A
 * streaming callback (sbx_exec_request.on_output) and a custom manifest
 * entry run on the worker thread, as in the synchronous call; their
 * user_data is borrowed the same way.
 *
 * Submission: an _async call returns the new operation, or NULL with
 * invalid_argument when @async, or the client, sandbox or request the call
 * needs, is NULL (the message names it; nothing is queued and no callback
 * runs), or when the pool is being freed. Every other problem with the
 * arguments is reported to the callback, exactly as the synchronous call
 * reports it. @done may be NULL: the operation runs and whatever it made is
 * released (see below). @user_data is passed to @done untouched.
 *
 * Results: the sbx_op pointer is valid from submission until its callback
 * returns; the library frees the operation then. Inside the callback, read
 * the outcome with the sbx_op_* accessors; take ownership of what you keep
 * with the steal functions. Whatever the callback did not steal is freed
 * after it returns: results, buffers and listings are freed, and a sandbox
 * made by a create or resume that the callback did not take is destroyed
 * (on a worker) and freed, so nothing billed is left behind.
 *
 * Cancellation: sbx_op_cancel(). An operation that has not started never
 * runs; a running one has its call cancelled (an exec's process tree gets
 * SIGTERM, then SIGKILL after SBX_KILL_GRACE_SECS, as on a timeout; a
 * provider call returns early where the backend supports it). Either way
 * the callback still runs, with an SBX_ERROR_CANCELLED error (outcome
 * failed when it never started, unknown when it had), and anything the
 * call produced regardless is released as above. A running call that
 * returned success all the same, before its cancellation took effect, has
 * context completed=true on that error: what it did was done (a destroy
 * ended its sandbox; a create's sandbox was released, destroyed, as above).
 *
 * Concurrency: at most max_workers operations run at once; threads start
 * lazily, one per operation waiting to run, up to that number, and stay
 * until sbx_async_free(). Operations start in submission order, except
 * that an operation whose client is at its sbx_async_set_max_per_client()
 * bound waits (without holding a worker) and later ones of other clients go
 * ahead of it. Several operations on one sandbox may run at once, as the
 * synchronous calls allow (an sbx_sandbox accepts concurrent calls); order
 * dependent calls by submitting the next one from the previous callback.
 *
 * Threads: the _async calls, sbx_async_set_max_per_client(),
 * sbx_async_pending() and sbx_op_cancel() may be called from any thread;
 * dispatching (sbx_async_dispatch / sbx_async_wait) from one thread at a
 * time, usually the event loop's; callbacks run there, and may submit new
 * operations and cancel others. Worker threads block every signal that
 * is not raised by a fault, so signals reach the application's threads.
 */

/** A pool of worker threads and its completion queue. */
typedef struct sbx_async sbx_async;
/** One asynchronous operation. */
typedef struct sbx_op sbx_op;

/**
 * sbx_op_done_fn:
 * Completion callback: runs once per operation (unless the pool is freed
 * before it was dispatched), in the thread that called
 * sbx_async_dispatch(). @op is valid until the callback returns.
 */
typedef void (*sbx_op_done_fn)(sbx_op *op, void *user_data);

/**
 * sbx_op_kind: which call an operation runs. Values are explicit and
 * append-only.
 */
typedef enum sbx_op_kind {
    SBX_OP_CLIENT_NEW = 1,          /* sbx_client_new_async */
    SBX_OP_CLIENT_PROBE = 2,        /* sbx_client_probe_async */
    SBX_OP_SANDBOX_CREATE = 3,      /* sbx_sandbox_create_async */
    SBX_OP_CREATE = 4,              /* sbx_create_async */
    SBX_OP_SANDBOX_RESUME = 5,      /* sbx_sandbox_resume_async */
    SBX_OP_RESUME = 6,              /* sbx_resume_async */
    SBX_OP_DESTROY = 7,             /* sbx_sandbox_destroy_async */
    SBX_OP_IS_ALIVE = 8,            /* sbx_sandbox_is_alive_async */
    SBX_OP_EXECUTE_COMMAND = 9,     /* sbx_sandbox_execute_async, _execute_command_async */
    SBX_OP_EXECUTE_SHELL = 10,      /* sbx_sandbox_execute_shell_async */
    SBX_OP_EXECUTE_CODE = 11,       /* sbx_sandbox_execute_code_async */
    SBX_OP_LIST_FILES = 12,         /* sbx_sandbox_list_files_async */
    SBX_OP_READ_FILE = 13,          /* sbx_sandbox_read_file_async */
    SBX_OP_READ_FILE_TO_FD = 14,    /* sbx_sandbox_read_file_to_fd_async */
    SBX_OP_WRITE_FILE = 15,         /* sbx_sandbox_write_file_async */
    SBX_OP_WRITE_FILE_FROM_FD = 16, /* sbx_sandbox_write_file_from_fd_async */
    SBX_OP_UPLOAD_FILE = 17,        /* sbx_sandbox_upload_file_async */
    SBX_OP_DOWNLOAD_FILE = 18,      /* sbx_sandbox_download_file_async */
    SBX_OP_UPLOAD_DIR = 19,         /* sbx_sandbox_upload_dir_async */
    SBX_OP_DOWNLOAD_DIR = 20,       /* sbx_sandbox_download_dir_async */
    SBX_OP_SESSION_STATE = 21,      /* sbx_sandbox_session_state_async */
    SBX_OP_EXTRACT_TAR = 22,        /* sbx_extract_tar_fd_async */
    SBX_OP_SNAPSHOT = 23,           /* sbx_sandbox_snapshot_async */
    SBX_OP_DESTROY_BY_ID = 24,      /* sbx_client_destroy_by_id_async */
    SBX_OP_RUN_AGENT = 25,          /* sbx_sandbox_run_agent_async */
    SBX_OP_APPLY_PATCH = 26,        /* sbx_sandbox_apply_patch_async */
    SBX_OP_PERSIST_WORKSPACE = 27,  /* sbx_sandbox_persist_workspace_async */
    SBX_OP_HYDRATE_WORKSPACE = 28,  /* sbx_sandbox_hydrate_workspace_async */
    SBX_OP_RESOLVE_PORT = 29        /* sbx_sandbox_resolve_port_async */
} sbx_op_kind;

/** Worker threads of a pool made with max_workers 0. */
#define SBX_ASYNC_DEFAULT_WORKERS 32
/** The largest max_workers sbx_async_new() accepts. */
#define SBX_ASYNC_MAX_WORKERS 1024

/**
 * sbx_async_new:
 * A new pool of at most @max_workers worker threads (0 =
 * SBX_ASYNC_DEFAULT_WORKERS; at most SBX_ASYNC_MAX_WORKERS, else
 * invalid_argument naming the value). No thread starts until the first
 * operation; the pool owns one eventfd (sbx_async_get_fd) and one more per
 * worker started. No per-client bound (see sbx_async_set_max_per_client).
 * Errors: invalid_argument; resource_exhausted when memory or descriptors
 * run out.
 * Free with sbx_async_free(). Since 0.1.
 */
SBX_EXPORT sbx_async *sbx_async_new(unsigned max_workers, sbx_error **error);

/**
 * sbx_async_free:
 * Frees the pool: operations that have not started are cancelled and
 * their callbacks never run; running operations are waited for (cancel
 * them first with sbx_op_cancel() to shorten that); completions not yet
 * dispatched are dropped without their callbacks. What the dropped
 * operations made is released as if unstolen (a created sandbox is
 * destroyed before this returns). Every worker thread is joined and every
 * descriptor closed. Called from a callback of @async (on the dispatching
 * thread), it returns at once and the pool is freed as above when the
 * outermost sbx_async_dispatch() / sbx_async_wait() running callbacks
 * returns: from the call on, submissions fail (invalid_argument), no
 * further callback runs (not even those of the same dispatch), and that
 * dispatch returns without touching @async again. Must not be called
 * while another thread uses @async. NULL ignored. Since 0.1.
 */
SBX_EXPORT void sbx_async_free(sbx_async *async);

/**
 * sbx_async_get_fd:
 * A descriptor (an eventfd) that is readable while completed operations
 * wait for sbx_async_dispatch(), for poll / epoll / libuv (watch POLLIN;
 * do not read or close it: it belongs to @async and lives as long as it).
 * It is not readable once every completion was dispatched. -1 for a NULL
 * @async. Thread-safe. Since 0.1.
 */
SBX_EXPORT int sbx_async_get_fd(const sbx_async *async);

/**
 * sbx_async_dispatch:
 * Runs, in the calling thread, the callbacks of every operation that had
 * completed when it was called (in completion order), then frees those
 * operations. Never blocks on a worker. Returns how many callbacks ran
 * (0 when none had completed), or -1 for a NULL @async. Since 0.1.
 */
SBX_EXPORT int sbx_async_dispatch(sbx_async *async);

/**
 * sbx_async_wait:
 * For programs without an event loop: waits (poll on the descriptor) until
 * at least one operation completed, dispatches as sbx_async_dispatch()
 * does, and returns how many callbacks ran. Returns 0 when @timeout_secs
 * passed first (seconds; < 0 = no limit; 0 = dispatch what is there) or
 * at once when no operation is outstanding (sbx_async_pending() is 0);
 * -1 for a NULL @async or a NaN @timeout_secs (nothing dispatched). Since
 * 0.1.
 */
SBX_EXPORT int sbx_async_wait(sbx_async *async, double timeout_secs);

/**
 * sbx_async_pending:
 * The number of operations submitted to @async that no dispatch has taken
 * yet (waiting, running, or completed and waiting for sbx_async_dispatch();
 * a dispatch takes every completion there is when it starts, so inside a
 * callback the operations of that dispatch no longer count). 0 for NULL.
 * Thread-safe. Since 0.1.
 */
SBX_EXPORT size_t sbx_async_pending(const sbx_async *async);

/**
 * sbx_async_set_max_per_client:
 * Runs at most @n operations of one client at once (0 = no bound, the
 * default): the others wait in the queue without holding a worker, and
 * operations of other clients start ahead of them. An operation's client
 * is the sbx_client it is given, or that its sandbox was made from; a
 * sandbox made by sbx_create() or sbx_resume() (on the process-wide
 * client of its backend), and sbx_client_new_async / sbx_create_async /
 * sbx_resume_async themselves, count against their backend name instead,
 * so all of them for one backend share one bound. sbx_extract_tar_fd_async
 * has no client. Applies to operations that start after the call. Errors:
 * invalid_argument for a NULL @async. Returns 0 or -1. Thread-safe.
 * Since 0.1.
 */
SBX_EXPORT int sbx_async_set_max_per_client(sbx_async *async, unsigned n,
                                            sbx_error **error);

/**
 * sbx_op_cancel:
 * Cancels @op (see "Cancellation" above). Returns 1 when the callback will
 * see SBX_ERROR_CANCELLED (also when @op was cancelled before), 0 when it
 * is too late: the operation had completed, and its callback reports what
 * the call did; -1 for a NULL @op. @op must be valid (its callback has not
 * returned). Thread-safe. Since 0.1.
 */
SBX_EXPORT int sbx_op_cancel(sbx_op *op);

/** sbx_op_get_kind: the call @op runs. Since 0.1. */
SBX_EXPORT sbx_op_kind sbx_op_get_kind(const sbx_op *op);

/**
 * sbx_op_get_error / sbx_op_steal_error:
 * The error of a failed operation, NULL when it succeeded. get_error's is
 * borrowed from @op (valid until the callback returns); steal_error hands
 * it to the caller (free with sbx_error_free(); the operation then reads
 * as failed to the other getters but get_error returns NULL). The error
 * carries the backend and the op name of the synchronous call
 * ("execute_command", "create", ...). Since 0.1.
 */
SBX_EXPORT const sbx_error *sbx_op_get_error(const sbx_op *op);
SBX_EXPORT sbx_error *sbx_op_steal_error(sbx_op *op);

/**
 * sbx_op_get0_sandbox:
 * The sandbox of @op: the one it ran on (a borrowed argument), or for a
 * create or resume the one it made (NULL when it failed or after
 * sbx_op_steal_sandbox). Borrowed; NULL for client and tar operations.
 * Since 0.1.
 */
SBX_EXPORT sbx_sandbox *sbx_op_get0_sandbox(const sbx_op *op);

/**
 * sbx_op_steal_sandbox:
 * The sandbox made by a create or resume operation (SBX_OP_SANDBOX_CREATE,
 * CREATE, SANDBOX_RESUME, RESUME), now owned by the caller (destroy and
 * free it as a synchronous create's); NULL when the operation failed, is
 * of another kind, or was stolen already. Since 0.1.
 */
SBX_EXPORT sbx_sandbox *sbx_op_steal_sandbox(sbx_op *op);

/**
 * sbx_op_steal_client:
 * The client made by sbx_client_new_async(), now the caller's (free with
 * sbx_client_free()); NULL otherwise. Since 0.1.
 */
SBX_EXPORT sbx_client *sbx_op_steal_client(sbx_op *op);

/**
 * sbx_op_get0_result / sbx_op_steal_result:
 * The result of an execute operation (command, shell, code): borrowed
 * from @op, or handed to the caller (sbx_result_free()). NULL when the
 * call failed, for other kinds, and after a steal. Since 0.1.
 */
SBX_EXPORT const sbx_result *sbx_op_get0_result(const sbx_op *op);
SBX_EXPORT sbx_result *sbx_op_steal_result(sbx_op *op);

/**
 * sbx_op_get0_agent_run / sbx_op_steal_agent_run:
 * The run of a run_agent operation: borrowed from @op, or handed to the
 * caller (sbx_agent_run_free()). NULL when the call failed, for other
 * kinds, and after a steal. Since 0.1.
 */
SBX_EXPORT const sbx_agent_run *sbx_op_get0_agent_run(const sbx_op *op);
SBX_EXPORT sbx_agent_run *sbx_op_steal_agent_run(sbx_op *op);

/**
 * sbx_op_steal_data:
 * The bytes of a read_file operation, or the JSON document of a
 * session_state operation, handed to the caller (free with free();
 * NUL-terminated, binary-safe: the length is stored in *@len when @len is
 * not NULL). NULL (and *@len 0) when the call failed, for other kinds, and
 * after a steal. Since 0.1.
 */
SBX_EXPORT char *sbx_op_steal_data(sbx_op *op, size_t *len);

/**
 * sbx_op_steal_file_list:
 * The listing of a list_files operation, handed to the caller (free with
 * sbx_file_info_list_free()); its length is stored in *@count when @count
 * is not NULL. NULL (and *@count 0) when the call failed, for other kinds,
 * and after a steal. An empty directory gives a non-NULL list with count
 * 0. Since 0.1.
 */
SBX_EXPORT sbx_file_info **sbx_op_steal_file_list(sbx_op *op, size_t *count);

/**
 * sbx_op_get_int64:
 * The integer outcome of @op: is_alive 1 or 0; upload_dir, download_dir
 * and extract_tar the number of entries; apply_patch the files changed; probe the capability bits (cast
 * to uint64_t); 0 for a successful operation of another kind; -1 when the
 * operation failed. Since 0.1.
 */
SBX_EXPORT int64_t sbx_op_get_int64(const sbx_op *op);

/*
 * The asynchronous forms. Each takes @async, then the synchronous call's
 * arguments (without its result pointers and its error), then @done and
 * @user_data, and the submission error. Results are read in the callback
 * with the accessor named in brackets.
 */

/** sbx_client_new() [steal_client]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_client_new_async(sbx_async *async, const char *backend,
                                        sbx_op_done_fn done, void *user_data,
                                        sbx_error **error);
/** sbx_client_new_with_mode() [steal_client]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_client_new_with_mode_async(sbx_async *async, const char *backend,
                                                  sbx_plugin_mode mode, sbx_op_done_fn done,
                                                  void *user_data, sbx_error **error);
/** sbx_client_probe() [get_int64: the capability bits]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_client_probe_async(sbx_async *async, sbx_client *client,
                                          sbx_op_done_fn done, void *user_data,
                                          sbx_error **error);
/** sbx_sandbox_create(); @options (may be NULL) copied [steal_sandbox].
 *  Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_create_async(sbx_async *async, sbx_client *client,
                                            const sbx_options *options,
                                            sbx_op_done_fn done, void *user_data,
                                            sbx_error **error);
/** sbx_create(); @options (may be NULL) copied [steal_sandbox]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_create_async(sbx_async *async, const char *backend,
                                    const sbx_options *options,
                                    sbx_op_done_fn done, void *user_data,
                                    sbx_error **error);
/** sbx_sandbox_resume() [steal_sandbox]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_resume_async(sbx_async *async, sbx_client *client,
                                            const char *state_json,
                                            sbx_op_done_fn done, void *user_data,
                                            sbx_error **error);
/** sbx_resume() [steal_sandbox]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_resume_async(sbx_async *async, const char *state_json,
                                    sbx_op_done_fn done, void *user_data,
                                    sbx_error **error);
/** sbx_sandbox_destroy() [get_error]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_destroy_async(sbx_async *async, sbx_sandbox *sandbox,
                                             sbx_op_done_fn done, void *user_data,
                                             sbx_error **error);
/** sbx_sandbox_is_alive() [get_int64: 1 or 0]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_is_alive_async(sbx_async *async, sbx_sandbox *sandbox,
                                              sbx_op_done_fn done, void *user_data,
                                              sbx_error **error);
/**
 * sbx_sandbox_execute_async / sbx_sandbox_execute_command_async:
 * sbx_sandbox_execute_command() (the two names are the same call). The
 * request is copied (read within its struct_size; struct_size too small is
 * a submission error) with its argv, shell, env, cwd and stdin bytes;
 * on_output and user_data are kept as given [get0_result, steal_result].
 * Since 0.1.
 */
SBX_EXPORT sbx_op *sbx_sandbox_execute_async(sbx_async *async, sbx_sandbox *sandbox,
                                             const sbx_exec_request *request,
                                             sbx_op_done_fn done, void *user_data,
                                             sbx_error **error);
SBX_EXPORT sbx_op *sbx_sandbox_execute_command_async(sbx_async *async, sbx_sandbox *sandbox,
                                                     const sbx_exec_request *request,
                                                     sbx_op_done_fn done, void *user_data,
                                                     sbx_error **error);
/** sbx_sandbox_execute_shell() [get0_result, steal_result]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_execute_shell_async(sbx_async *async, sbx_sandbox *sandbox,
                                                   const char *script,
                                                   sbx_op_done_fn done, void *user_data,
                                                   sbx_error **error);
/** sbx_sandbox_execute_code(); @request (may be NULL) copied as for
 *  execute_async [get0_result, steal_result]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_execute_code_async(sbx_async *async, sbx_sandbox *sandbox,
                                                  const char *language, const char *code,
                                                  const sbx_exec_request *request,
                                                  sbx_op_done_fn done, void *user_data,
                                                  sbx_error **error);
/** sbx_sandbox_list_files() [steal_file_list]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_list_files_async(sbx_async *async, sbx_sandbox *sandbox,
                                                const char *path,
                                                sbx_op_done_fn done, void *user_data,
                                                sbx_error **error);
/** sbx_sandbox_read_file() [steal_data]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_read_file_async(sbx_async *async, sbx_sandbox *sandbox,
                                               const char *path,
                                               sbx_op_done_fn done, void *user_data,
                                               sbx_error **error);
/** sbx_sandbox_list_files_as(), sbx_sandbox_read_file_as(),
 *  sbx_sandbox_write_file_as(): as the forms above, with @user (copied;
 *  NULL = the plain call) [as theirs]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_list_files_as_async(sbx_async *async, sbx_sandbox *sandbox,
                                                   const char *path, const char *user,
                                                   sbx_op_done_fn done, void *user_data,
                                                   sbx_error **error);
SBX_EXPORT sbx_op *sbx_sandbox_read_file_as_async(sbx_async *async, sbx_sandbox *sandbox,
                                                  const char *path, const char *user,
                                                  sbx_op_done_fn done, void *user_data,
                                                  sbx_error **error);
SBX_EXPORT sbx_op *sbx_sandbox_write_file_as_async(sbx_async *async, sbx_sandbox *sandbox,
                                                   const char *path, const char *user,
                                                   const void *data, size_t len,
                                                   sbx_op_done_fn done, void *user_data,
                                                   sbx_error **error);
/** sbx_sandbox_read_file_to_fd(); @fd borrowed until the callback
 *  [get_error]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_read_file_to_fd_async(sbx_async *async, sbx_sandbox *sandbox,
                                                     const char *path, int fd,
                                                     sbx_op_done_fn done, void *user_data,
                                                     sbx_error **error);
/** sbx_sandbox_write_file(); the @len bytes of @data copied [get_error].
 *  Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_write_file_async(sbx_async *async, sbx_sandbox *sandbox,
                                                const char *path, const void *data,
                                                size_t len,
                                                sbx_op_done_fn done, void *user_data,
                                                sbx_error **error);
/** sbx_sandbox_write_file_from_fd(); @fd borrowed until the callback
 *  [get_error]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_write_file_from_fd_async(sbx_async *async,
                                                        sbx_sandbox *sandbox,
                                                        const char *path, int fd,
                                                        uint32_t mode,
                                                        sbx_op_done_fn done, void *user_data,
                                                        sbx_error **error);
/** sbx_sandbox_upload_file() / download_file() [get_error]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_upload_file_async(sbx_async *async, sbx_sandbox *sandbox,
                                                 const char *local_path,
                                                 const char *sandbox_path,
                                                 sbx_op_done_fn done, void *user_data,
                                                 sbx_error **error);
SBX_EXPORT sbx_op *sbx_sandbox_download_file_async(sbx_async *async, sbx_sandbox *sandbox,
                                                   const char *sandbox_path,
                                                   const char *local_path,
                                                   sbx_op_done_fn done, void *user_data,
                                                   sbx_error **error);
/** sbx_sandbox_upload_dir() / download_dir() [get_int64: entries].
 *  Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_upload_dir_async(sbx_async *async, sbx_sandbox *sandbox,
                                                const char *local_dir,
                                                const char *sandbox_dir,
                                                sbx_op_done_fn done, void *user_data,
                                                sbx_error **error);
SBX_EXPORT sbx_op *sbx_sandbox_download_dir_async(sbx_async *async, sbx_sandbox *sandbox,
                                                  const char *sandbox_dir,
                                                  const char *local_dir,
                                                  sbx_op_done_fn done, void *user_data,
                                                  sbx_error **error);
/** sbx_sandbox_session_state() [steal_data: the JSON document]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_session_state_async(sbx_async *async, sbx_sandbox *sandbox,
                                                   sbx_op_done_fn done, void *user_data,
                                                   sbx_error **error);
/** sbx_sandbox_snapshot() [steal_data: the snapshot id]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_snapshot_async(sbx_async *async, sbx_sandbox *sandbox,
                                              sbx_op_done_fn done, void *user_data,
                                              sbx_error **error);
/** sbx_client_destroy_by_id(); @id copied. Since 0.1. */
SBX_EXPORT sbx_op *sbx_client_destroy_by_id_async(sbx_async *async, sbx_client *client,
                                                  const char *id, sbx_op_done_fn done,
                                                  void *user_data, sbx_error **error);
/** sbx_sandbox_run_agent(); the request copied (within its struct_size:
 *  its strings, extra_args and env) [get0_agent_run, steal_agent_run].
 *  Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_run_agent_async(sbx_async *async, sbx_sandbox *sandbox,
                                               const sbx_agent_request *request,
                                               sbx_op_done_fn done, void *user_data,
                                               sbx_error **error);
/** sbx_sandbox_apply_patch(); the @len bytes of @patch and @dir copied
 *  [get_int64: files changed]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_apply_patch_async(sbx_async *async, sbx_sandbox *sandbox,
                                                 const char *patch, size_t len, int strip,
                                                 const char *dir, sbx_op_done_fn done,
                                                 void *user_data, sbx_error **error);
/** sbx_sandbox_persist_workspace() / sbx_sandbox_hydrate_workspace();
 *  @dir copied, @fd borrowed until the callback [get_int64: entries].
 *  Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_persist_workspace_async(sbx_async *async, sbx_sandbox *sandbox,
                                                       const char *dir, unsigned flags, int fd,
                                                       sbx_op_done_fn done, void *user_data,
                                                       sbx_error **error);
SBX_EXPORT sbx_op *sbx_sandbox_hydrate_workspace_async(sbx_async *async, sbx_sandbox *sandbox,
                                                       const char *dir, unsigned flags, int fd,
                                                       sbx_op_done_fn done, void *user_data,
                                                       sbx_error **error);
/** sbx_sandbox_resolve_port() [steal_data: the endpoint; get_int64: the
 *  port]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_sandbox_resolve_port_async(sbx_async *async, sbx_sandbox *sandbox,
                                                  unsigned port, sbx_op_done_fn done,
                                                  void *user_data, sbx_error **error);
/** sbx_extract_tar_fd(); @fd borrowed until the callback [get_int64:
 *  entries]. Since 0.1. */
SBX_EXPORT sbx_op *sbx_extract_tar_fd_async(sbx_async *async, int fd, const char *dest_dir,
                                            sbx_op_done_fn done, void *user_data,
                                            sbx_error **error);

#ifdef __cplusplus
}
#endif
#endif /* SBX_SBX_H */
