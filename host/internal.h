/*
 * host/internal.h — declarations shared by the files of libsbx.
 *
 * Nothing here is exported: the library is built with -fvisibility=hidden
 * and only functions marked SBX_EXPORT in <sbx/sbx.h> are public. Internal
 * functions still carry the sbx_ prefix.
 */
#ifndef SBX_HOST_INTERNAL_H
#define SBX_HOST_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sbx/sbx.h>
#include <sbx/plugin.h>

#define SBX_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

/* ------------------------------------------------------------------------ */
/* util.c                                                                    */
/* ------------------------------------------------------------------------ */

/** strdup() that accepts NULL (returns NULL) ; NULL also when memory runs out. */
char *sbx_strdup(const char *s);
/** strndup() that accepts NULL. */
char *sbx_strndup(const char *s, size_t n);
/** A copy of @s (NUL-terminated) that is valid UTF-8: each byte that does
 *  not start a well-formed sequence (RFC 3629: no overlong forms, no
 *  surrogates, nothing past U+10FFFF) becomes U+FFFD. NULL for NULL or
 *  when memory runs out. For text that goes into JSON. */
char *sbx_utf8_dup(const char *s);
/** New formatted string (caller frees), or NULL when memory runs out. */
char *sbx_asprintf(const char *fmt, ...) SBX_PRINTF(1, 2);
/** Same with a va_list. */
char *sbx_vasprintf(const char *fmt, va_list ap) SBX_PRINTF(1, 0);

/**
 * sbx_strv: a growable vector of owned strings, always NULL-terminated once
 * it holds one entry (items[count] == NULL). Zero-initialise to start.
 */
typedef struct sbx_strv {
    char **items;
    size_t count;
    size_t cap;
} sbx_strv;

/** Appends a copy of @s. Returns 0, or -1 when memory runs out. */
int sbx_strv_push(sbx_strv *v, const char *s);
/** Appends @s, taking ownership (freed on failure). Returns 0 or -1. */
int sbx_strv_push_take(sbx_strv *v, char *s);
/** Appends a formatted string. Returns 0 or -1. */
int sbx_strv_pushf(sbx_strv *v, const char *fmt, ...) SBX_PRINTF(2, 3);
/** The items joined with @sep, as a new string ("" for none); NULL on OOM. */
char *sbx_strv_join(const sbx_strv *v, const char *sep);
/** 1 when an item equals @s. */
int sbx_strv_contains(const sbx_strv *v, const char *s);
/** Frees every item and resets @v to empty. */
void sbx_strv_clear(sbx_strv *v);
/** A NULL-terminated view of @v that is never NULL itself (an empty vector
 *  gives a static { NULL }). Borrowed. */
const char *const *sbx_strv_view(const sbx_strv *v);

/** sbx_buf: a growable byte buffer. Zero-initialise to start. */
typedef struct sbx_buf {
    char *data;
    size_t len;
    size_t cap;
} sbx_buf;

/** Appends @len bytes. Returns 0, or -1 when memory runs out. */
int sbx_buf_append(sbx_buf *b, const void *data, size_t len);
/** Takes the bytes out as a NUL-terminated malloc'd block (never NULL
 *  unless memory runs out; "" for an empty buffer) and resets @b. */
char *sbx_buf_steal(sbx_buf *b, size_t *len);
/** Frees the bytes and resets @b. */
void sbx_buf_clear(sbx_buf *b);

/** CLOCK_MONOTONIC now, in seconds. */
double sbx_monotonic_now(void);
/** CLOCK_REALTIME now, in UNIX seconds. */
double sbx_wallclock_now(void);

/** 1 when @key matches [A-Za-z_][A-Za-z0-9_]*, else 0. */
int sbx_env_key_valid(const char *key);
/** Same for the first @len bytes of @key. */
int sbx_env_key_valid_n(const char *key, size_t len);
/* 1 when @user may be a user name or uid (sbx_exec_request.user,
 * sbx_options_set_user): 1..256 bytes, none whitespace or control. */
int sbx_user_valid(const char *user);
/** 1 when @name matches [a-z0-9][a-z0-9_-]* (a backend name), else 0. */
int sbx_backend_name_valid(const char *name);

/** Length of a create token: "sbx-" + 32 hex digits. */
#define SBX_TOKEN_LEN 36
/** Fills @out with a fresh random token and a NUL. Returns 0 or -1. */
int sbx_random_token(char out[SBX_TOKEN_LEN + 1]);

/** Sets O_NONBLOCK on @fd. Returns 0 or -1. */
int sbx_set_nonblock(int fd);
/** Closes *@fd when >= 0 and sets it to -1; keeps errno. */
void sbx_close_fd(int *fd);

/**
 * @url with the password of a "scheme://user:password@host" userinfo
 * replaced by "[redacted]" (new string; NULL on OOM). Other URLs and local
 * paths are copied unchanged.
 */
char *sbx_redact_url(const char *url);

/* ------------------------------------------------------------------------ */
/* record.c: the lifecycle record (SQLite, STATE_DIR/lifecycle.db)          */
/* ------------------------------------------------------------------------ */

/** The start time of process @pid in clock ticks since boot (field 22 of
 *  /proc/PID/stat). Returns 0, or -1 when it is gone or unreadable. */
int sbx_process_start_ticks(pid_t pid, unsigned long long *ticks);
/** 1 when process @pid lives (not a zombie) and started at @start_ticks
 *  (0, as recorded by older libraries: any start time). */
int sbx_process_is(pid_t pid, unsigned long long start_ticks);

/** The state directory: $SBX_STATE_DIR, else $XDG_STATE_HOME/sbx, else
 *  $HOME/.local/state/sbx, into @out. 0, or -1 (configuration). */
int sbx_state_dir(char *out, size_t cap, sbx_error **err);
/** sbx_state_dir(), made (missing components 0700) and checked with
 *  sbx_check_private(). 0 or -1 (configuration, naming the path). */
int sbx_state_dir_make(char *out, size_t cap, sbx_error **err);
/** Checks that @path (or the open @fd, when >= 0) is a directory (@is_dir)
 *  or a regular file owned by the effective user and not writable by group
 *  or others; configuration error naming the path, owner and mode if not. */
int sbx_check_private(const char *path, int fd, int is_dir, sbx_error **err);

/** A new create token whose first 8 hex digits are this record's store id
 *  (opening the record). 0 or -1 (configuration). */
int sbx_record_new_token(char out[SBX_TOKEN_LEN + 1], sbx_error **err);
/** 1 when @token was made by this record store (sbx_record_new_token). */
int sbx_record_token_is_ours(const char *token);
/** Records a sandbox about to be created, with this process as its owner.
 *  @expires_at in UNIX seconds (0 = none). 0 or -1. */
int sbx_record_begin(const char *token, const char *backend, double expires_at,
                     int detached, sbx_error **err);
/** Completes @token's row with the provider's id and the session state,
 *  and, when @expires_at > 0 (UNIX seconds), the expiry counted from when
 *  the sandbox became usable (the one sbx_record_begin() had was counted
 *  from the request). 0 or -1. */
int sbx_record_complete(const char *token, const char *provider_id,
                        const char *session_state, double expires_at, sbx_error **err);
/* The calls below that change or read rows (complete, remove,
 * set_detached, find, remove_owner, get) make nothing when this process has
 * the record closed and its file does not exist: 0 rows, or not found. */
/** Removes @token's row (and its owners). Rows removed (0 or 1), or -1. */
int sbx_record_remove(const char *token, sbx_error **err);
/** Marks @token detached (1) or attached (0). Rows changed, or -1. */
int sbx_record_set_detached(const char *token, int detached, sbx_error **err);
/** Finds the token of (@backend, @provider_id): 1 found, 0 not, -1 error. */
int sbx_record_find(const char *backend, const char *provider_id,
                    char token[SBX_TOKEN_LEN + 1], sbx_error **err);
/** Adds this process as an owner of @token. 0 or -1. */
int sbx_record_add_owner(const char *token, sbx_error **err);
/** Removes owner (@pid, @start_ticks) of @token. Rows removed, or -1. */
int sbx_record_remove_owner(const char *token, pid_t pid, unsigned long long start_ticks,
                            sbx_error **err);
/** Reads @token's row: 1 with *@detached and *@owners_alive (owners whose
 *  process lives, same boot), 0 when there is no row, -1 on error. */
int sbx_record_get(const char *token, int *detached, int *owners_alive, sbx_error **err);

/** One row of the record, as sbx_record_foreach() reports it (borrowed). */
typedef struct sbx_record_row {
    const char *create_token;
    const char *backend;
    const char *provider_id;    /* "" until the provider answered */
    const char *session_state;  /* "" until then, or for backends without */
    double created_at;          /* UNIX seconds */
    double expires_at;          /* UNIX seconds; 0 = none */
    int detached;
    int owners;                 /* owner rows */
    int owners_alive;           /* of which the process lives (same boot) */
} sbx_record_row;
typedef int (*sbx_record_fn)(const sbx_record_row *row, void *user_data);
/** Calls @fn for each row, oldest first, without holding the record's lock
 *  (so @fn may change the record); non-zero from @fn stops. 0 or -1. */
int sbx_record_foreach(sbx_record_fn fn, void *user_data, sbx_error **err);
/** The database's path once opened ("" before). Borrowed. */
const char *sbx_record_path(void);

/* ------------------------------------------------------------------------ */
/* error.c                                                                   */
/* ------------------------------------------------------------------------ */

/** A new error with @code, @op (may be NULL) and a formatted message. NULL
 *  only when memory runs out. */
sbx_error *sbx_error_new(sbx_error_code code, const char *op,
                         const char *fmt, ...) SBX_PRINTF(3, 4);
sbx_error *sbx_error_newv(sbx_error_code code, const char *op,
                          const char *fmt, va_list ap) SBX_PRINTF(3, 0);

/**
 * GError-style setter: when @err is not NULL and *@err is NULL, stores a new
 * error there and returns it (so context can be added); returns NULL
 * otherwise (nothing stored). Also backs host->set_error.
 */
sbx_error *sbx_set_error(sbx_error **err, sbx_error_code code, const char *op,
                         const char *fmt, ...) SBX_PRINTF(4, 5);

/** Appends (or replaces) context @key=@value; secret-looking keys are stored
 *  as "[redacted]". NULL @error or @key is ignored. */
void sbx_error_add_context(sbx_error *error, const char *key, const char *value);
/** Same with a formatted value. */
void sbx_error_add_contextf(sbx_error *error, const char *key,
                            const char *fmt, ...) SBX_PRINTF(3, 4);
/** Sets the outcome (failed / unknown). NULL ignored. */
void sbx_error_set_outcome(sbx_error *error, sbx_error_outcome outcome);
/** Sets backend and op only where they are still empty. NULL ignored. */
/* Renames the op of @error to @to when it begins with @from ("exec" for
 * exec, exec_start, exec_wait; nothing when it has another op): a call
 * made of another one reports its own name. */
void sbx_error_replace_op(sbx_error *error, const char *from, const char *to);
void sbx_error_fill(sbx_error *error, const char *backend, const char *op);
/** Replaces the message with a formatted one (e.g. to add a prefix). */
void sbx_error_set_message(sbx_error *error, const char *fmt, ...) SBX_PRINTF(2, 3);

/**
 * Hands @src to the caller: stored in *@dest when @dest is not NULL and
 * *@dest is NULL, freed otherwise. @src may be NULL.
 */
void sbx_error_propagate(sbx_error **dest, sbx_error *src);

/**
 * The code of a failure of operation or slot @op that says nothing more
 * specific: creation_failed for create, resume and client_new, workspace
 * for the file calls (read_file, write_file, list_files, stat_file,
 * upload_*, download_*), execution_failed for anything else (NULL
 * included). Never SBX_ERROR_UNKNOWN.
 */
sbx_error_code sbx_error_code_for_op(const char *op);

/**
 * The code of a failure with errno @e of a call that makes a resource (a
 * descriptor, a socket, a file, a process, memory): resource_exhausted for
 * EMFILE, ENFILE, ENOMEM, ENOBUFS and EAGAIN (the process limit), as
 * sbx_error_code documents; @otherwise for every other errno.
 */
sbx_error_code sbx_errno_code(int e, sbx_error_code otherwise);

/**
 * Makes sure *@err holds an error after a slot reported failure: when the
 * plugin stored none, stores the code sbx_error_code_for_op(@slot) gives,
 * saying @slot failed without a reason. @err must not be NULL.
 */
void sbx_error_ensure(sbx_error **err, const char *backend, const char *slot);

/** 1 when a context key looks secret (token, key, secret, password,
 *  authorization; case-insensitive). */
int sbx_context_key_is_secret(const char *key);

/*
 * Uninstalled use (as GStreamer's): when the running library is the one
 * the build tree made (its .libs/libsbx.so, or the build tree's
 * sbx-plugin-host, which compiles the library in), the absolute build
 * directory configure gave (SBX_BUILD_DIR), else NULL. Installed copies
 * never see the build tree. Thread-safe (decided once).
 */
const char *sbx_uninstalled_build_dir(void);
/** The source directory of that build tree, or NULL when not uninstalled. */
const char *sbx_uninstalled_source_dir(void);

/** Logs "sbx[backend]: message" on stderr when SBX_DEBUG asks for @level
 *  (see "Logging" in sbx.h). */
void sbx_log(sbx_log_level level, const char *backend, const char *fmt, ...)
    SBX_PRINTF(3, 4);

/** The services table handed to every plugin's setup slot. */
const sbx_host_services *sbx_host_services_get(void);

/* ------------------------------------------------------------------------ */
/* loader.c                                                                  */
/* ------------------------------------------------------------------------ */

/**
 * SBX_SLOT(plugin, field): the slot @field of a descriptor, or NULL when the
 * plugin's struct_size does not cover it (an older, shorter descriptor).
 * Never reads past struct_size.
 */
#define SBX_SLOT_COVERED(plugin, field)                                       \
    (offsetof(sbx_plugin, field) + sizeof(((const sbx_plugin *)0)->field)     \
     <= (plugin)->struct_size)
#define SBX_SLOT(plugin, field)                                               \
    (SBX_SLOT_COVERED(plugin, field) ? (plugin)->field : NULL)

/**
 * Finds, loads and checks the plugin of backend @name (once per plugin file
 * per process; thread-safe) and returns its descriptor, which stays valid
 * for the life of the process. On failure returns NULL with *@err set:
 * invalid_argument (bad name), backend_not_installed (no file; context
 * "searched" and "package") or configuration (file present but unusable;
 * context "path"). The error's backend and op are left to the caller.
 */
const sbx_plugin *sbx_plugin_load(const char *name, sbx_error **err);

/** Finds the file of backend @name without loading it: 0, or -1 with
 *  *@err set as sbx_plugin_load() does for a bad name or a missing file. */
int sbx_plugin_find(const char *name, sbx_error **err);

/** The plugin search path: SBX_PLUGIN_PATH entries, then the plugin dir
 *  (duplicates removed). Returns 0 or -1 (OOM). */
int sbx_plugin_search_dirs(sbx_strv *dirs);

/** The facts `sbx backends` shows of plugin file @path of backend @name,
 *  loaded in this process. NULL on OOM. */
sbx_backend_info *sbx_backend_info_inspect(const char *name, const char *path);
/** Frees one info made by sbx_backend_info_inspect(). */
void sbx_backend_info_free(sbx_backend_info *info);

/** The sbx-plugin-host program: $SBX_PLUGIN_HOST or the installed one
 *  (new string; NULL on OOM). */
char *sbx_plugin_host_path(void);

/** "killed by signal 11 (SIGSEGV)" / "exited with status 3" for a wait
 *  status (new string; NULL on OOM). host/wire.c. */
char *sbx_wait_status_text(int status);

/* ------------------------------------------------------------------------ */
/* options.c                                                                 */
/* ------------------------------------------------------------------------ */

/** The options' env as "KEY=VALUE" strings, in insertion order, appended to
 *  @out. Returns 0 or -1 (OOM). @options may be NULL. */
int sbx_options_env_strv(const sbx_options *options, sbx_strv *out);
/** The set-fields bitmask (0 for NULL options). */
uint64_t sbx_options_set_fields(const sbx_options *options);
/** The exposed ports of sbx_options_add_port() (borrowed) in *@ports;
 *  returns how many. */
size_t sbx_options_get_ports(const sbx_options *options, const uint16_t **ports);
/** Borrowed git repo URL / ref, NULL when unset. */
const char *sbx_options_get0_git_repo(const sbx_options *options);
const char *sbx_options_get0_git_ref(const sbx_options *options);

/* ------------------------------------------------------------------------ */
/* client.c                                                                  */
/* ------------------------------------------------------------------------ */

struct sbx_client {
    /* usage.c: the calls of its sandboxes and their ended lifetimes, the
     * sandboxes whose lifetime runs, the ledger file; under usage_lock. */
    pthread_mutex_t usage_lock;
    sbx_usage usage;
    struct sbx_sandbox *live;
    char *ledger_path;
    const sbx_plugin *plugin;     /* loaded and checked, never unloaded; or
                                   * the proxy's descriptor (out of process) */
    sbx_plugin_client *handle;    /* the plugin's client (may be NULL) */
    char *backend;                /* backend name */
    sbx_plugin_mode mode;         /* OUT_OF_PROCESS or IN_PROCESS */
    double call_timeout;          /* seconds per slot call; 0 = none */
};

struct sbx_sandbox {
    sbx_client *client;
    int owns_client;              /* made by sbx_create() / sbx_resume(): holds a
                                   * reference to the shared client */
    sbx_plugin_sandbox *handle;   /* the plugin's sandbox */
    char *id;                     /* never NULL ("" when unknown) */
    char *root;                   /* never NULL ("" where it owns /) */
    double timeout_secs;          /* default exec timeout */
    double expires_mono;          /* CLOCK_MONOTONIC end of the lifetime as
                                   * this process counts it (from the create
                                   * call); 0 when unknown (resumed) */
    pthread_mutex_t lock;         /* guards destroyed */
    int destroyed;
    char token[SBX_TOKEN_LEN + 1];/* its lifecycle record's create token; "" = none */
    /* usage.c: its size (for its rate), the start of its lifetime in this
     * process, its agent calls (under lock), its place in the client's
     * list of live sandboxes (under the client's usage_lock). */
    double cpu;
    double ram_gib;
    char *gpu;
    int live_price;               /* 1: priced at live_pusd_per_hour (the
                                   * provider's live price, from the session
                                   * state's "price_usd_per_hour"), not at
                                   * the price table's rate for its size */
    int64_t live_pusd_per_hour;
    double started_mono;
    int usage_started;
    int usage_ended;
    sbx_usage usage;
    struct sbx_sandbox *live_next;
    struct sbx_sandbox *live_prev;
    /* direct.c: out of process, where its commands can go without the
     * plugin host (the session state's "exec_endpoint"); NULL: none. */
    struct sbx_direct_ep *direct;
};

/**
 * The process-wide client of @backend in the default plugin mode, shared by
 * sbx_create() and sbx_resume(): made on first use, one reference more per
 * call. NULL with *@error when it cannot be made. Thread-safe.
 */
sbx_client *sbx_shared_client_get(const char *backend, sbx_error **error);
/** Drops one reference of a client from sbx_shared_client_get(). The client
 *  is kept at 0 (with its plugin host) for the process's next sbx_create()
 *  or sbx_resume(). Thread-safe. */
void sbx_shared_client_put(sbx_client *client);

/**
 * A call context with the calling thread's call scope (deadline and cancel
 * descriptor, see sbx_call_scope_set; none by default) and no token.
 */
void sbx_call_ctx_init(sbx_call_ctx *ctx);
/* sbx_call_ctx_init() for one slot call on @client: in process, the
 * deadline is also at most the client's call timeout from now
 * (sbx_client_set_call_timeout), which the plugin honours as it honours
 * any deadline; out of process the proxy applies it. */
void sbx_call_ctx_init_for(sbx_call_ctx *ctx, const sbx_client *client);

/**
 * The calling thread's call scope: every call context made on this thread
 * from now on carries @cancel_fd (readable = cancel the call; -1 = none;
 * borrowed, must stay open while set) and @deadline (CLOCK_MONOTONIC
 * seconds; 0 = none). The asynchronous workers set it around each
 * operation. sbx_call_scope_set(-1, 0) clears it.
 */
void sbx_call_scope_set(int cancel_fd, double deadline);
/** Reads the calling thread's call scope; NULL pointers are skipped. */
void sbx_call_scope_get(int *cancel_fd, double *deadline);

/**
 * Fails with not_found ("sandbox ID was destroyed") when @sandbox was
 * destroyed, and with invalid_argument when it is NULL. Returns 0 or -1.
 */
int sbx_sandbox_check_usable(sbx_sandbox *sandbox, sbx_error **err);

/**
 * After a call on @sandbox failed with @err: when @err is not_found and
 * the backend says the sandbox is gone (is_alive 0; a local sandbox whose
 * lifetime ended, say), removes its lifecycle-record row, so nothing is
 * left for sbx_gc(). Does nothing otherwise (@err and @sandbox may be
 * NULL). Thread-safe.
 */
void sbx_sandbox_note_gone(sbx_sandbox *sandbox, const sbx_error *err);

/**
 * The plugin host: @fd (a pidfd it keeps open) is the application it
 * serves, the owner whose pidfd host services' owner_pidfd hands plugins
 * (a duplicate per call). Until then (and in process) it is this process.
 * Call before any plugin call; not thread-safe against them.
 */
void sbx_host_set_owner_pidfd(int fd);

/* ------------------------------------------------------------------------ */
/* exec.c                                                                    */
/* ------------------------------------------------------------------------ */

/**
 * The exec engine behind every execute_* call. @request is read only within
 * its struct_size. Returns a new result, or NULL with *@err set (backend and
 * op are left for the caller to fill).
 */
sbx_result *sbx_exec_run(sbx_sandbox *sandbox, const sbx_exec_request *request,
                         sbx_error **err);

/**
 * sbx_exec_run with the command's stdin read from @stdin_fd and its stdout
 * written to @stdout_fd, handed to the plugin as they are (no copy through
 * this process; borrowed, left open). -1 keeps the usual behaviour
 * (request stdin bytes / captured stdout). Used by the file fallbacks.
 */
sbx_result *sbx_exec_run_fds(sbx_sandbox *sandbox, const sbx_exec_request *request,
                             int stdin_fd, int stdout_fd, sbx_error **err);

/* ------------------------------------------------------------------------ */
/* result.c                                                                  */
/* ------------------------------------------------------------------------ */

struct sbx_result {
    char *out;                    /* NUL-terminated, never NULL */
    size_t out_len;
    char *err;                    /* NUL-terminated, never NULL */
    size_t err_len;
    int exit_code;
    int timed_out;
    int oom_killed;               /* the memory limit killed a process of it */
    int out_truncated;
    int err_truncated;
    double duration_secs;
};

/** A result with empty (non-NULL) buffers, exit code 0; NULL on OOM. */
sbx_result *sbx_result_new(void);
/** Adds to @error the contexts "exit_code", "stdout" and "stderr" of
 *  @result, each stream's last @max bytes (what a command_failed error
 *  carries). NULL @error or @result: nothing. */
void sbx_error_add_output(sbx_error *error, const sbx_result *result, size_t max);
/** Moves the bytes of @b into the result's @stream buffer. Returns 0 or -1. */
int sbx_result_take_output(sbx_result *result, sbx_stream stream, sbx_buf *b);


/* ------------------------------------------------------------------------ */
/* presets.c, workspace.c                                                    */
/* ------------------------------------------------------------------------ */

/** 1 when @name matches [a-z0-9][a-z0-9._-]* (at most 128 bytes). */
int sbx_preset_name_valid(const char *name);
/** Numeric / boolean preset key: 1 and *@value when present, else 0. */
int sbx_preset_get_number(const sbx_preset *preset, const char *key, double *value);
int sbx_preset_get_bool(const sbx_preset *preset, const char *key, int *value);
/** Appends the preset's env as KEY=VALUE, skipping keys @options sets. */
int sbx_preset_env_strv(const sbx_preset *preset, const sbx_options *options, sbx_strv *out);
/** Appends setup_commands, then backend_setup_commands[@backend]. */
int sbx_preset_setup_commands(const sbx_preset *preset, const char *backend, sbx_strv *out);

/** Takes one more reference to @manifest; returns it. */
sbx_manifest *sbx_manifest_ref(sbx_manifest *manifest);
/** Materialises every entry in order; on failure a creation_failed error
 *  with context step=workspace, dest, entry. NULL manifest: nothing. */
int sbx_manifest_apply(const sbx_manifest *manifest, sbx_sandbox *sandbox, sbx_error **err);

/** Options internals used by create. */
sbx_manifest *sbx_options_get0_workspace(const sbx_options *options);
/** The progress callback and its data (NULL, NULL when none). */
sbx_progress_fn sbx_options_get_progress(const sbx_options *options, void **user_data);
size_t sbx_options_get_file_count(const sbx_options *options);
/** The @index-th file of sbx_options_add_file: path, bytes, length. */
void sbx_options_get0_file(const sbx_options *options, size_t index, const char **path,
                           const char **data, size_t *len);

/**
 * The path commands see for sandbox path @path: under the sandbox root
 * where the sandbox has one (local), else @path itself. A relative path is
 * taken from the root. A ".." component is refused (invalid_argument).
 * New string, or NULL with *@err set.
 */
char *sbx_sandbox_resolve_path(const sbx_sandbox *sandbox, const char *path, sbx_error **err);


/* ------------------------------------------------------------------------ */
/* money.c, pricing.c, usage.c, agent.c                                      */
/* ------------------------------------------------------------------------ */

struct json_object;

/** Reads the decimal @text ("0.0070147", "-2", "1e-5") as a count of
 *  10^-@scale units, rounded half away from zero past the scale. 0, or -1
 *  when it is not a decimal number or does not fit an int64_t. */
int sbx_decimal_parse(const char *text, int scale, int64_t *out);
/** Prints @value (10^-@scale units) exactly, without trailing zeros
 *  ("0.011117", "31.5", "0") into @buf. */
void sbx_decimal_format(int64_t value, int scale, char *buf, size_t cap);
/** sbx_decimal_parse on a JSON number (its text as written in the
 *  document) or string. 0 or -1. */
int sbx_json_decimal(struct json_object *v, int scale, int64_t *out);
/** A JSON number printed as the exact decimal @value (10^-@scale units). */
struct json_object *sbx_json_new_decimal(int64_t value, int scale);
/** @a + @b, held at INT64_MAX / INT64_MIN instead of overflowing: the
 *  sums of token counts and money in usage. */
static inline int64_t
sbx_sat_add(int64_t a, int64_t b)
{
    int64_t r;

    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/** json.c: parses @json (NUL-terminated, not NULL) as one whole JSON
 *  document, white space allowed around it and nothing else after it. 0
 *  with *@out the value (the caller's to put; NULL for the document
 *  `null`); -1 with *@out NULL, *@at the byte offset where the document
 *  goes wrong and *@why what is wrong there (a static string: json-c's
 *  description, "unexpected end of the document" or "unexpected text after
 *  the document"); -2 with *@out NULL and *@why "out of memory" when no
 *  tokenizer could be made. A number at the very end is complete.
 *  Thread-safe. */
int sbx_json_parse_whole(const char *json, struct json_object **out, size_t *at,
                         const char **why);

/** One size's price on one backend. */
typedef struct sbx_rate {
    int64_t pusd_per_hour;        /* the whole size's rate, pico-dollars per hour */
    double granularity_s;         /* billing step (0: continuous) */
    double minimum_s;             /* least seconds billed */
    char source[512];             /* the entry's source_url ("" when none) */
    char origin[512];             /* the file the entry came from */
} sbx_rate;

/** The merged price table (bundled file, then the user's), with "files"
 *  and each entry's "origin". NULL with configuration naming the file. */
struct json_object *sbx_pricing_load(sbx_error **err);
/** The rate of @vcpu, @ram_gib and @gpu ("TYPE[:N]", NULL: none) on
 *  @backend. 0, or -1: not_found (no entry, or a rate not published),
 *  invalid_argument, configuration. Thread-safe; the table is parsed once
 *  and kept while its files stay as they were (pricing.c). */
int sbx_pricing_rate(const char *backend, double vcpu, double ram_gib, const char *gpu,
                     sbx_rate *rate, sbx_error **err);
/** Seconds billed for @seconds of use (granularity and minimum applied). */
double sbx_rate_billed_seconds(const sbx_rate *rate, double seconds);
/** @rate per second in femto-dollars (rounded to the femto-dollar). */
int64_t sbx_rate_fusd_per_second(const sbx_rate *rate);
/** The cost of @seconds at @rate, pico-dollars (rounded once); INT64_MAX
 *  when it does not fit (sbx_rate_cost_checked says so). */
int64_t sbx_rate_cost(const sbx_rate *rate, double seconds);
/** sbx_rate_cost into *@pusd: 0, or -1 when the cost does not fit an
 *  int64_t (*@pusd is then INT64_MAX). */
int sbx_rate_cost_checked(const sbx_rate *rate, double seconds, int64_t *pusd);

/** usage.c: takes the provider's live price of @sandbox from the "data"
 *  member of its session state @doc (a JSON object, borrowed; NULL or one
 *  without "price_usd_per_hour" leaves the table's rate). Call before
 *  sbx_usage_sandbox_start(). */
void sbx_usage_sandbox_live_price(sbx_sandbox *sandbox, struct json_object *doc);

/* ------------------------------------------------------------------------
 * direct.c: direct exec (out of process, straight to a sandbox's
 * supervisor; the protocol is described there and in <sbx/plugin.h>'s
 * session_state).
 * ---------------------------------------------------------------------- */
typedef struct sbx_direct_ep sbx_direct_ep;
/** Reads the "exec_endpoint" of session state document @doc (the library's
 *  wrapping, its plugin's object under "data") into @sandbox->direct when
 *  its client runs out of process and the endpoint is one this library
 *  speaks (and, with @check_start, its process is the one running now:
 *  at resume; after create the plugin has just checked it); anything else
 *  leaves it NULL. Once, after create and at resume. */
void sbx_direct_from_state(sbx_sandbox *sandbox, struct json_object *doc, int check_start);
/** Frees what sbx_direct_from_state() made (NULL ignored). */
void sbx_direct_ep_free(sbx_direct_ep *ep);
/** 1 when @sandbox has an endpoint and its lifetime is not about to end
 *  (then the plugin, which knows what it is, is asked), else 0. */
int sbx_direct_usable(const sbx_sandbox *sandbox);
/**
 * Starts the command of @rq (argv or shell, env; its stdin, stdout and
 * stderr descriptors, -1: /dev/null; the sandbox's working directory and
 * user) at @sandbox's endpoint, within @ctx's deadline (10 s at most).
 * 0 with *@process (its slots are sbx_direct_plugin()'s), or 1 when the
 * request did not go out (the endpoint cannot be reached, is served by
 * another process, or no memory): nothing runs, ask the plugin host.
 */
int sbx_direct_exec_start(sbx_sandbox *sandbox, const sbx_call_ctx *ctx,
                          const sbx_plugin_exec_request *rq, sbx_plugin_process **process);
/**
 * Ends @sandbox at its endpoint: DESTROY, answered by DESTROYED once every
 * process of it has ended and its directory is gone from its place (the
 * supervisor removes the rest and exits). 1 when so; 0 when the request did
 * not go out or no answer came (the endpoint cannot be reached, is served
 * by another process, the supervisor died or stalls 15 s), or the endpoint
 * takes no DESTROY ("destroy": false, bubblewrap's): ask the plugin host,
 * whose plugin ends it by pid if it must; -1 with *@err (timeout,
 * cancelled) when @ctx's deadline passed or it was cancelled while waiting.
 * After 1 the plugin host is still to run its destroy (sbx_proxy_destroy_
 * unwaited), for what the plugin keeps of the sandbox.
 */
int sbx_direct_destroy(sbx_sandbox *sandbox, const sbx_call_ctx *ctx, sbx_error **err);
/** The descriptor whose exec_wait, exec_event_fd, exec_kill and exec_free
 *  serve a process sbx_direct_exec_start() started. */
const sbx_plugin *sbx_direct_plugin(void);
/** usage.c: a sandbox made or resumed: its size, start, client list. */
void sbx_usage_sandbox_start(sbx_sandbox *sandbox, double cpu, int64_t memory_mb,
                             const char *gpu);
/** usage.c: the sandbox was destroyed (@destroyed 1) or its handle is
 *  released without destroying it (0): its lifetime is counted into its
 *  client, and a lifetime record goes to the ledger. Once per sandbox. */
void sbx_usage_sandbox_end(sbx_sandbox *sandbox, int destroyed);
/** usage.c: client side. init opens the ledger SBX_LEDGER names: 0, or
 *  -1 (configuration naming it when it cannot be opened; nothing to
 *  free then). */
int sbx_usage_client_init(sbx_client *client, sbx_error **error);
void sbx_usage_client_free(sbx_client *client);
/** usage.c: adds one agent call's usage to its sandbox and client and
 *  writes its ledger record (@record, a JSON object, borrowed). */
void sbx_usage_add_call(sbx_sandbox *sandbox, const sbx_usage *call,
                        struct json_object *record);
/** usage.c: the ledger path of @client (borrowed; NULL when none). */
void sbx_usage_sandbox_free(sbx_sandbox *sandbox);
/** usage.c: @u as a JSON object (sbx_usage_to_json's members). */
struct json_object *sbx_usage_json(const sbx_usage *u);
/** usage.c: the five token members of @u added to @o. */
void sbx_usage_add_tokens_json(struct json_object *o, const sbx_usage *u);
/** patch.c: removes sandbox file @path (`rm -f`; an absolute path is
 *  taken under the sandbox's root, as the file calls take it; a relative
 *  one from @cwd, NULL: the workdir). 0, or -1 with execution_failed
 *  naming the path. */
int sbx_sandbox_remove_path(sbx_sandbox *sandbox, const char *path, const char *cwd,
                            sbx_error **err);
/** usage.c: the compute of one call of @seconds on @sandbox into @u, and
 *  the size, rate and seconds members into @record (may be NULL). 1 when
 *  the rate is known, else 0 (compute_cost_unknown set). */
int sbx_usage_call_rate(const sbx_sandbox *sandbox, double seconds, sbx_usage *u,
                        struct json_object *record);

#endif /* SBX_HOST_INTERNAL_H */
