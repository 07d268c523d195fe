/*
 * provider.h — what the hosted-provider plugins write alike, over cloud.h
 * (provider.c, in the same static base library):
 *
 *   - the "gone" flag of a sandbox the provider no longer has, and its
 *     not_found error with reason "gone" (CASE-32), with what the
 *     provider's view says of it as context, the flag set and the error
 *     given in one call;
 *   - the wait until a sandbox (or a snapshot) reaches a state, polled with
 *     a growing pause and bounded by the call's deadline, and by table the
 *     wait until a sandbox runs, a sleeping one woken once;
 *   - the session state's shape: a versioned JSON object holding no secret,
 *     written into host memory and read back with its version checked, and
 *     resume's start: the state read, the sandbox got, an ended one gone;
 *     the same look (the resume table) for a sandbox whose call was
 *     refused: whether it ended, and then its gone flag and error; the
 *     resume slot's start and end around the plugin's struct (its start
 *     from the state alone too, for a provider that gets nothing); a call
 *     on a sandbox whose refusal is read by the provider's table (its own
 *     404, a file's, or a look at the sandbox);
 *   - the missing-cwd check after a script of cl_shell_script() exited
 *     CL_CWD_MISSING_EXIT (CASE-18, CASE-46);
 *   - a descriptor as the sink or the source of a request body;
 *   - the marker every process of one command carries in its environment,
 *     and the in-sandbox command that signals them all (setsid'd and
 *     orphaned descendants included, which a process-group kill misses);
 *   - the create's environment as a file in the sandbox that each command
 *     sources, so that it holds after a resume in another process while the
 *     session state holds no env value (per-call values still win), and a
 *     command's per-call environment as export lines, and its stdin as an
 *     uploaded file the script reads;
 *   - the sandbox head (id, gone flag, data plane) with the sandbox_id,
 *     sandbox_root, destroy and is_alive slots over it and the answer to a
 *     call on it (a request at a URL it takes, or at its data plane), the
 *     error of a file call's answer, the setup slot, the fixed probe slot,
 *     client_new's end, the plugin's sandbox struct allocated and freed
 *     around it, the session_state slot's start and end, the start of a
 *     command and the exec_wait (with the missing-cwd check), exec_kill
 *     (by the mark) and exec_event_fd slots over a cl_proc, exec_resize's
 *     check and wait, write_file over an upload that takes no mode, the
 *     client's config and credential, the create's workdir check,
 *     refusals, unanswered request (reaped by its token), undo after a
 *     failure and working directory, the plugin's own mkdir and chmod commands, a directory
 *     listed by a find command, an item's GET and DELETE, the ids of a
 *     create token's items, paths under the workdir, and small string
 *     helpers;
 *   - the port slots of a provider that routes every port itself, and a
 *     string in host memory;
 *   - the create's provider-side lifetime from its timeout;
 *   - the create's refusals by table (options the provider cannot honour,
 *     backend_options of a provider that takes none), the bounds of its
 *     number options (cpu, memory_mb, disk_mb, timeout_secs) by table, its
 *     gpu option read as TYPE[:COUNT], its backend_options
 *     by a table of the provider's, the id of its one-POST create (nested
 *     too) and its ownership labels; a paged listing (or one page of a
 *     listing the plugin pages itself), and list_owned's item (with RFC
 *     3339 times) or one sandbox's ownership labels;
 *   - the end of a stop that is done when the sandbox has ended already;
 *   - the descriptor's head, the slots every plugin fills with its own
 *     functions, the script proc slots and the entry point, and the
 *     destroy, destroy_by_id and script exec_start slots, the GET,
 *     DELETE and is_alive of a sandbox that is an item of the API and a
 *     call on the data plane, by macro;
 *   - a JSON POST that sends {} for no body, the exec_start slot of a
 *     provider whose commands are script procs, and the list_files slot by
 *     a command and the read_file slot over a download.
 *
 * Prefix, threading, errors and ownership as in cloud.h.
 */
#ifndef SBX_CLOUD_PROVIDER_H
#define SBX_CLOUD_PROVIDER_H

#include "cloud.h"

#include <stdio.h>

/* ------------------------------------------------------------------------ */
/* The gone flag                                                             */
/* ------------------------------------------------------------------------ */

/** Set once the provider answered that a sandbox no longer exists (a 404
 *  on the sandbox, or a terminal state); every later call on it fails at
 *  once with cl_gone_error(). Guarded by its own lock. */
typedef struct cl_gone {
    pthread_mutex_t lock;
    int gone;
} cl_gone;

void cl_gone_init(cl_gone *g);
void cl_gone_destroy(cl_gone *g);
/** 1 when set, else 0. */
int cl_gone_get(cl_gone *g);
void cl_gone_set(cl_gone *g);

/**
 * The error of a call on a sandbox that is gone: not_found, "@provider
 * sandbox @id is gone (the provider no longer has it)", context
 * sandbox_id=@id and reason=gone; not retryable. Returns the error (also
 * stored in *@error when @error is not NULL).
 */
sbx_error *cl_gone_error(sbx_error **error, const char *op, const char *provider,
                         const char *id);

/**
 * 0 while a sandbox whose lifetime (@lifetime seconds) ends at UNIX time
 * @expires_at (0: none) lasts; else -1 with not_found "sandbox @id expired
 * at T (lifetime N s)", contexts sandbox_id and expires_at (T, RFC 3339
 * UTC), as the local backend words it. For plugins that end a sandbox at
 * its lifetime themselves (ray, cloudflare): calls from the expiry on.
 */
int cl_lifetime_check(double expires_at, double lifetime, const char *id, const char *op,
                      sbx_error **error);

/**
 * cl_gone_error() with what the provider's view @view (NULL: none) says of
 * the sandbox: for each member named in @keys (NULL-ended) that @view
 * holds as a string, context KEY=VALUE, the member "status" given as
 * "state". Returns the error as cl_gone_error() does.
 */
sbx_error *cl_gone_error_view(sbx_error **error, const char *op, const char *provider,
                              const char *id, struct json_object *view,
                              const char *const *keys);

/**
 * -1 with cl_gone_error() in *@error when @g is set, else 0.
 */
int cl_gone_check(cl_gone *g, const char *op, const char *provider, const char *id,
                  sbx_error **error);

/**
 * Sets @g (the provider answered that sandbox @id is no more) and returns
 * cl_gone_error(@error, @op, @provider, @id), also stored in *@error when
 * @error is not NULL. Thread-safe.
 */
sbx_error *cl_gone_mark(cl_gone *g, sbx_error **error, const char *op, const char *provider,
                        const char *id);

/* ------------------------------------------------------------------------ */
/* Waiting for a state                                                       */
/* ------------------------------------------------------------------------ */

/**
 * One look at the thing waited for: 1 when it is there, 0 when not yet (with
 * *@state set to a string that lives until the next call, for the timeout's
 * message; may stay NULL), -1 with *@error set when it never will be.
 */
typedef int (*cl_wait_fn)(void *ud, const char **state, sbx_error **error);

/**
 * Calls @fn until it gives 1 or -1, pausing 0.05 s, doubling to 0.5 s
 * between looks, for at most @max_s seconds or the call's deadline, which
 * comes first (@ctx may be NULL). 0 when @fn gave 1; -1 when it gave -1
 * (its error), and -1 with a timeout error "@what did not happen (it is
 * STATE)" with context state=STATE when the bound passed, or "cancelled
 * while waiting: @what" when the call was cancelled.
 */
int cl_wait_until(const sbx_call_ctx *ctx, double max_s, cl_wait_fn fn, void *ud,
                  const char *op, const char *what, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Session state                                                             */
/* ------------------------------------------------------------------------ */

/**
 * @j (a JSON object the caller keeps and frees) as plain JSON, slashes not
 * escaped, in memory from cl_host->alloc (the host frees it): what a
 * session_state slot returns. NULL with resource_exhausted on no memory.
 * The caller puts no credential and no env value in @j.
 */
char *cl_state_out(struct json_object *j, const char *op, sbx_error **error);

struct cl_sandbox;

/**
 * The start of a session_state slot on sandbox @s of @provider: NULL with
 * cl_gone_error() when @s is gone (op session_state); else a new object
 * {"version": @version, @id_key: ID} with "workdir": WORKDIR when @s has
 * one (its head's workdir), to which the plugin adds its own members before
 * cl_state_end().
 */
struct json_object *cl_state_new(struct cl_sandbox *s, const char *provider, int version,
                                 const char *id_key, sbx_error **error);

/** The end of a session_state slot: cl_state_out(@j) (op session_state),
 *  @j put. NULL when @j is NULL (its error stored already). */
char *cl_state_end(struct json_object *j, sbx_error **error);

/**
 * Parses @state_json: a new JSON object (free with json_object_put) whose
 * "version" is @version and whose @id_key is a non-empty string, stored in
 * *@id (borrowed from the object). NULL with invalid_argument "@provider
 * session state: needs \"version\": @version and a \"@id_key\"" otherwise.
 */
struct json_object *cl_state_in(const char *state_json, int version, const char *id_key,
                                const char *provider, const char *op, const char **id,
                                sbx_error **error);

/** Gets sandbox @id from the provider (GET, a safe call): its JSON (a new
 *  object, json_object_put()), or NULL with *@status the answer's status
 *  (0 when none came) and, unless it is 404, *@error set. */
typedef struct json_object *(*cl_get_fn)(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                                          const char *id, long *status, const char *op,
                                          sbx_error **error);

/** The plugin's gone error for sandbox @id (cl_gone_error() with the
 *  context it adds from @item, the provider's view of it; @item NULL when
 *  the provider answered 404). Returns the error, also stored in *@error. */
typedef sbx_error *(*cl_item_gone_fn)(sbx_error **error, const char *op, const char *id,
                                      struct json_object *item);

/** How a provider's resume slot finds the sandbox its session state names:
 *  a constant table of the plugin's. */
typedef struct cl_resume_spec {
    const char *provider;           /* backend name, in errors */
    int version;                    /* the session state's "version" */
    const char *id_key;             /* the state's member holding the id */
    cl_get_fn get;                  /* the provider's GET of one sandbox */
    const char *state_key;          /* the answer's state member; NULL: not looked at */
    const char *const *dead;        /* NULL-terminated ended states; NULL: none */
    cl_item_gone_fn gone;           /* NULL: cl_gone_error(), with context
                                     * @state_key=STATE when it ended */
} cl_resume_spec;

/**
 * The start of a resume slot (op "resume"): cl_state_in(@state_json,
 * @rs->version, @rs->id_key, @rs->provider), its object in *@state and the
 * id in *@id (borrowed from *@state), then @rs->get of that id. Returns the
 * provider's view of the sandbox (a new object, json_object_put()); the
 * caller makes its handle from both and puts *@state. NULL, with *@state
 * NULL and *@error set, when the state is not one of this provider's
 * (invalid_argument, as cl_state_in()), when no answer came (@rs->get's
 * error), when the provider has no such sandbox (404) or when its
 * @rs->state_key is one of @rs->dead: the gone error (@rs->gone, which
 * gets the view in the second case and NULL in the first). Thread-safe as
 * @rs->get is. Behind it: CASE-32 (a sandbox that vanished is gone, not
 * made again).
 */
struct json_object *cl_resume_get(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                                  const char *state_json, const cl_resume_spec *rs,
                                  struct json_object **state, const char **id,
                                  sbx_error **error);

/**
 * The start of a resume slot of a provider whose sandbox struct (@size
 * bytes) begins with a cl_sandbox: cl_resume_get() (op resume), then the
 * struct made by cl_sandbox_new() with @client, the state's id and its
 * "workdir" when that is cl_workdir_ok() (else none). Returns the struct,
 * the provider's view of the sandbox in *@view and the state in *@state:
 * the caller adds its own members and ends with cl_resume_end(). NULL with
 * *@view and *@state NULL and *@error set: cl_resume_get()'s error, or
 * resource_exhausted. Thread-safe as @rs->get is.
 */
void *cl_resume_new(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                    const cl_resume_spec *rs, size_t size, struct json_object **view,
                    struct json_object **state, sbx_error **error);

/**
 * The start of a resume slot of a provider whose sandbox is not got here
 * (the plugin's own call follows: a connect, a wait until it runs):
 * cl_state_in(@state_json, @version, @id_key, @provider) (op resume), then
 * the struct of @size bytes (at least a cl_sandbox, which starts it) made
 * by cl_sandbox_new() with @client, the state's id and its "workdir" when
 * that is cl_workdir_ok() (else none). Returns the struct with the state
 * in *@state: the caller adds its own members and ends with
 * cl_resume_end() (no view). NULL with *@state NULL and *@error set:
 * invalid_argument as cl_state_in(), or resource_exhausted. Thread-safe.
 */
void *cl_resume_state(sbx_plugin_client *client, const char *state_json, const char *provider,
                      int version, const char *id_key, size_t size, struct json_object **state,
                      sbx_error **error);

/**
 * The end of a resume slot begun by cl_resume_new() or cl_resume_state():
 * @view and @state put (NULL: none);
 * when @rc is 0, @sb stored in *@sandbox and 0; else @sb freed with
 * @free_fn (NULL: cl_sandbox_free()) and -1 (the error stored already by
 * the step that failed).
 */
int cl_resume_end(int rc, void *sb, sbx_plugin_sandbox **sandbox, struct json_object *view,
                  struct json_object *state, void (*free_fn)(sbx_plugin_sandbox *sb));

/**
 * Whether sandbox @id has ended, asked through @rs->get (a GET, safe; its
 * error dropped, not stored): 1 when the provider answered 404 or an
 * @rs->state_key that is one of @rs->dead, else 0 (also when no answer
 * came). *@view (when @view is not NULL) gets the answer's JSON (a new
 * object, json_object_put(); NULL when none came or on a 404). For a call
 * whose refusal may mean the sandbox is gone, or a stop or delete that is
 * done when it has ended. Thread-safe as @rs->get is.
 */
int cl_sandbox_ended(sbx_plugin_client *client, const sbx_call_ctx *ctx, const cl_resume_spec *rs,
                     const char *id, const char *op, struct json_object **view);

/**
 * The end of a stop (or a delete) of sandbox @id, whose request (on
 * @client, a cl_client head) gave @rc: -1 when no answer came (its error
 * stored already); else 0 when the answer @r is 2xx, 404 or @gone_status
 * (0: no other; 410, say), or when it is not but the provider says the
 * sandbox has ended (cl_sandbox_ended(), one GET: it refuses a stop once
 * it is stopped); else -1 with the answer's error (cl_fail_status(), @what
 * naming the call). @r is cleared in every case. Thread-safe as @rs->get
 * is.
 */
int cl_stop_answer(sbx_plugin_client *client, const sbx_call_ctx *ctx, const cl_resume_spec *rs,
                   const char *id, int rc, cl_resp *r, long gone_status, const char *op,
                   const char *what, sbx_error **error);

/**
 * After an answer on sandbox @s that may say it is gone (a 404 that may be
 * a file's, a refusal): cl_sandbox_ended() on its id; when it has ended,
 * its gone flag set and the gone error stored as cl_resume_get() makes it
 * (@rs->gone with the provider's view, NULL after a 404; else
 * cl_gone_error() with context @rs->state_key=STATE) and 1; else 0 with
 * nothing stored. Thread-safe as @rs->get is (CASE-32).
 */
int cl_sandbox_confirm_gone(struct cl_sandbox *s, sbx_plugin_client *client,
                            const sbx_call_ctx *ctx, const cl_resume_spec *rs, const char *op,
                            sbx_error **error);

/**
 * How a provider's sandbox is waited for until it runs, and woken when it
 * sleeps (cl_sandbox_wake()): a constant table of the plugin's.
 */
typedef struct cl_wake_spec {
    const cl_resume_spec *rs;   /* the provider, its GET of a sandbox, the
                                 * state member, the ended states (gone,
                                 * with rs->gone's error or the state in
                                 * context) */
    const char *noun;           /* what the state is called ("status"), in
                                 * the timeout's message */
    const char *none;           /* the state of an answer without one */
    const char *ready;          /* the state it runs in ("running") */
    const char *const *asleep;  /* NULL-terminated states woken (once) by
                                 * @wake; NULL: none */
    double max_s;               /* the wait's own bound, in seconds */
    /* A state that is neither @ready nor ended, with the provider's view
     * @view: -1 with *@error when it never runs (a failed deploy), else
     * 0. NULL: none fails. */
    int (*check)(struct cl_sandbox *s, struct json_object *view, const char *state,
                 const char *op, sbx_error **error);
    /* Wakes sandbox @s, found in @state: 0, or -1 with *@error. */
    int (*wake)(struct cl_sandbox *s, const sbx_call_ctx *ctx, const char *state,
                const char *op, sbx_error **error);
} cl_wake_spec;

/**
 * Waits until sandbox @s (whose head has its client) is in @ws->ready, by
 * cl_wait_until() over @ws->rs->get (bounded by @ws->max_s and the call's
 * deadline), waking it once when it is in one of @ws->asleep (CASE-53).
 * 0 once it runs; -1 with *@error: the gone flag set and the gone error
 * (spec's) after a 404 or an ended state; @ws->check's or @ws->wake's
 * error; the GET's error; or the timeout "@provider sandbox ID reaching
 * @noun @ready did not happen (it is STATE)". Thread-safe as the spec's
 * functions are.
 */
int cl_sandbox_wake(struct cl_sandbox *s, const sbx_call_ctx *ctx, const cl_wake_spec *ws,
                    const char *op, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* The missing working directory                                             */
/* ------------------------------------------------------------------------ */

/**
 * The cwd of a script made by cl_shell_script(), still shell-quoted as the
 * script's first line has it ("cd -- QUOTED || exit ..."), as a new
 * string; NULL when the script names no cwd.
 */
char *cl_script_cwd(const char *script);

/**
 * The error of a command whose working directory @quoted_cwd (as
 * cl_script_cwd() gives it, or the plain path where the provider takes the
 * cwd itself) does not exist: not_found, "the working directory
 * @quoted_cwd does not exist in the sandbox", context path. The caller has
 * checked (e.g. with "test -d") that the directory is missing, since the
 * command itself may exit CL_CWD_MISSING_EXIT.
 */
sbx_error *cl_cwd_missing_error(sbx_error **error, const char *op, const char *quoted_cwd);

/* ------------------------------------------------------------------------ */
/* Descriptors as request bodies and sinks                                   */
/* ------------------------------------------------------------------------ */

/** A cl_req sink that writes everything to the descriptor *(int *)@ud
 *  (retrying on EINTR and short writes); -1 when it cannot. */
int cl_fd_sink(void *ud, const char *p, size_t n);
/** A cl_req source that reads from the descriptor *(int *)@ud (retrying on
 *  EINTR): bytes read, 0 at end of file, -1 on error. */
ssize_t cl_fd_source(void *ud, char *buf, size_t cap);

/* ------------------------------------------------------------------------ */
/* Every process of one command                                              */
/* ------------------------------------------------------------------------ */

/** The environment variable that marks every process of one command: the
 *  command gets CL_EXEC_MARK=<its tag> and its children inherit it. */
#define CL_EXEC_MARK "SBX_EXEC_ID"

/**
 * A shell command, run in the sandbox by a process that does not carry the
 * mark, that sends signal @sig to every process whose environment holds
 * CL_EXEC_MARK=@tag (from /proc/N/environ) and exits 0. @tag: letters,
 * digits, '-' and '_' only (NULL otherwise). A new string.
 */
char *cl_mark_kill_command(const char *tag, int sig);

/**
 * cl_mark_kill_command() for another mark: the command signals every
 * process whose environment holds @var=@tag (a sandbox's mark, carried by
 * all of its commands' processes). @var and @tag: letters, digits, '-' and
 * '_' only (NULL otherwise). A new string; NULL also on no memory.
 * Thread-safe.
 */
char *cl_mark_kill_command_var(const char *var, const char *tag, int sig);

/**
 * A shell command, run in the sandbox by a process that does not carry the
 * mark, that sets the size of the terminal of the command whose processes
 * carry CL_EXEC_MARK=@tag to @rows x @cols (on the descriptor 0 of the
 * first such process that has a terminal there: one TIOCSWINSZ through
 * python3's termios, else stty's rows then cols; the terminal's foreground
 * process group gets SIGWINCH when it changed), for
 * providers that give a command a terminal but have no call to resize it.
 * It looks for up to 5 s (the command may be starting) and exits 0 once
 * the size is set, CL_RESIZE_NONE_EXIT when no process of the command has
 * a terminal. @tag as for cl_mark_kill_command(); @rows and @cols
 * 1..65535. A new string; NULL on bad input or no memory. Thread-safe.
 */
char *cl_mark_resize_command(const char *tag, unsigned rows, unsigned cols);
#define CL_RESIZE_NONE_EXIT 3

/* ------------------------------------------------------------------------ */
/* The create's environment as a file in the sandbox                         */
/* ------------------------------------------------------------------------ */

/** The environment variable naming, for one command, the keys it was given
 *  per call (colon-separated), which the create's file leaves alone. */
#define CL_CALL_KEYS "SBX_CALL_ENV_KEYS"

/**
 * The content of the file holding the create's environment @env ("K=V"
 * strings): for each, a line that exports K with V shell-quoted unless K
 * is among the keys in $CL_CALL_KEYS. A new string ("" for no env); NULL
 * on no memory or a key that is not a shell name.
 */
char *cl_env_file(const char *const *env);

/**
 * The check of a per-call environment @env ("K=V" strings) that becomes
 * shell assignments or exports: 0 when every key is a shell name (letters,
 * digits and '_', not starting with a digit); else -1 with invalid_argument
 * "env key \"K\" is not a shell name (KEY=VALUE, KEY of letters, digits
 * and _, not starting with a digit)", context env_name=K (cut to 127
 * bytes; a key ending in "_key" would be redacted as a secret), op @op; a
 * string without '=' fails the same way. Thread-safe.
 */
int cl_env_names_check(const char *const *env, const char *op, sbx_error **error);

/**
 * Appends to @b, for each "K=V" string of @env (NULL: none) in order, the
 * line "export K=V\n" with V shell-quoted (cl_shell_quote()); a string
 * without '=' is left out. The keys are written as they are: the caller
 * has checked them as shell names (cl_env_names_check()). 0, or -1 on no
 * memory (@b then holds part of the lines; the caller clears it).
 * Thread-safe on distinct buffers.
 */
int cl_buf_env_exports(cl_buf *b, const char *const *env);

/**
 * cl_buf_env_exports() into a new string (free()): "" for no env; NULL on
 * no memory. A command's per-call environment as shell lines, for a
 * provider whose exec takes none or whose values must reach a script.
 */
char *cl_env_exports(const char *const *env);

/**
 * The first line of a command's script that sources the file @path (made
 * from cl_env_file()) when it exists and then unsets CL_CALL_KEYS, ending
 * with a newline. A new string.
 */
char *cl_env_file_source(const char *path);

/**
 * The value of CL_CALL_KEYS for the per-call environment @env: its keys
 * joined by ':'. A new string ("" for none).
 */
char *cl_call_keys(const char *const *env);

/* ------------------------------------------------------------------------ */
/* The sandbox head, and what creates and commands write alike               */
/* ------------------------------------------------------------------------ */

/**
 * printf into a new string (free()), or NULL on no memory.
 */
char *cl_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/**
 * A copy of the NULL-terminated string array @v (NULL: an empty array):
 * new strings in a new array, freed with cl_strv_free(); NULL on no
 * memory.
 */
char **cl_strv_dup(const char *const *v);

/** The string member @key of @o (borrowed), or @dflt when @o is NULL or
 *  holds no string there: a provider's status with the word it uses for
 *  none. */
const char *cl_json_str_or(struct json_object *o, const char *key, const char *dflt);

/** 1 when @s is one of the NULL-terminated @list (a provider's ended
 *  states, say), else 0; 0 when @s or @list is NULL. */
int cl_str_in(const char *s, const char *const *list);

/**
 * Writes @nbytes random bytes (at most 32; getrandom(), else rand()) as
 * 2 * @nbytes lowercase hex digits and a NUL to @out: a tag that names one
 * command (CL_EXEC_MARK) or one of its files.
 */
void cl_random_hex(char *out, size_t nbytes);

/**
 * The JSON object {"K": "V", ...} of the "K=V" strings of @env (NULL: {});
 * a string without '=' is left out. A new object (json_object_put()).
 */
struct json_object *cl_env_object(const char *const *env);

/**
 * cl_request() with @body (a JSON object the caller keeps, or NULL for
 * none) as the request's plain JSON body. Returns as cl_request().
 */
int cl_request_json(cl_http *h, const sbx_call_ctx *ctx, const char *method, const char *url,
                    struct json_object *body, cl_idempotency idem, cl_resp *resp,
                    const char *op, const char *what, sbx_error **error);

/** 1 when @workdir is an absolute path without a ".." component, else 0
 *  (NULL too): a working directory a plugin takes from the caller or from
 *  a session state. */
int cl_workdir_ok(const char *workdir);

/**
 * The create's workdir check: 0 when @workdir is NULL, empty or
 * cl_workdir_ok(); else -1 with invalid_argument "@provider backend:
 * workdir @workdir is not an absolute path in the sandbox" (or, for an
 * absolute one, "... has a \"..\" component"), context path=@workdir, op
 * "create".
 */
int cl_workdir_check(const char *provider, const char *workdir, sbx_error **error);

/** @s without its trailing slashes (a base URL): a new string, NULL on no
 *  memory. */
char *cl_trim_slash(const char *s);

/**
 * @path as a file call sends it: an absolute @path as it is; a relative one
 * under @workdir ("@workdir/@path", one slash between) when @workdir is
 * not NULL, else as it is (the provider resolves it). A new string, NULL
 * on no memory.
 */
char *cl_path_in(const char *workdir, const char *path);

/**
 * The route of a file call that names its file in the query: @prefix
 * ("/files?path=") then cl_path_in(@workdir, @path) percent-encoded
 * (cl_url_escape()). A new string, NULL on no memory. Thread-safe.
 */
char *cl_path_query(const char *prefix, const char *workdir, const char *path);

/**
 * The name a stat_file slot hands back (it must outlive the call): @name
 * (NULL: "") copied into a buffer of the calling thread's (at most 4095
 * bytes kept), valid until that thread's next call. Returns the buffer.
 */
const char *cl_stat_name(const char *name);

/**
 * What every plugin's sandbox starts with (its first member, so that the
 * slots below take the plugin's sbx_plugin_sandbox): the provider's id and
 * the gone flag. Not thread-safe to init or clear; the flag has its lock.
 */
typedef struct cl_sandbox {
    char *id;           /* the provider's id, a new string */
    cl_gone gone;
    uint16_t *ports;    /* exposed ports, ascending (cl_ports_*); guarded by gone.lock */
    size_t n_ports;
    struct sbx_plugin_client *c;    /* the client that made or resumed it
                                     * (borrowed: the host frees a client
                                     * after its sandboxes); NULL when none */
    char *workdir;      /* the default working directory (absolute), a new
                         * string freed with the head, or NULL: the
                         * provider's own */
    char *plane;        /* the sandbox's own base URL, its data plane
                         * (processes, files; cl_plane_request()), no
                         * trailing slash: a new string freed with the
                         * head, or NULL: none */
} cl_sandbox;

/** Copies @id into @s and clears its gone flag, its client, its workdir
 *  and its data plane: 0, or -1 on no memory (then @s holds nothing to
 *  clear). */
int cl_sandbox_init(cl_sandbox *s, const char *id);
/** Frees what cl_sandbox_init() made, the workdir and the data plane (not
 *  @s itself). */
void cl_sandbox_clear(cl_sandbox *s);
/**
 * A plugin's sandbox struct of @size bytes (at least sizeof(cl_sandbox);
 * zeroed) whose first member, a cl_sandbox, holds @id (cl_sandbox_init()):
 * the constructor the plugins write alike. NULL on no memory. Freed with
 * cl_sandbox_free() once the plugin freed its own members. Thread-safe.
 */
void *cl_sandbox_alloc(size_t size, const char *id);
/**
 * cl_sandbox_alloc() with the head's client @c and a copy of @workdir
 * (NULL or "": none) set: NULL on no memory (nothing left to free).
 * Thread-safe.
 */
void *cl_sandbox_new(size_t size, struct sbx_plugin_client *c, const char *id,
                     const char *workdir);
/**
 * Sets the data plane of @s (a sandbox served at a URL of its own: a
 * per-sandbox host, a toolbox proxy) to a copy of @url without its
 * trailing slashes, the one it had freed: 0; -1 when @url is NULL or on
 * no memory (@s keeps what it had). Not thread-safe: while the handle is
 * made.
 */
int cl_sandbox_set_plane(cl_sandbox *s, const char *url);
/**
 * cl_sandbox_new() whose head also holds the data plane @plane
 * (cl_sandbox_set_plane()): NULL when @plane is NULL or on no memory
 * (nothing left to free). Thread-safe.
 */
void *cl_sandbox_new_at(size_t size, struct sbx_plugin_client *c, const char *id,
                        const char *workdir, const char *plane);
/** Clears the cl_sandbox that starts @sb and frees @sb (NULL: nothing). */
void cl_sandbox_free(void *sb);
/** The sandbox_free slot of a plugin whose sandbox holds nothing the head
 *  does not free: cl_sandbox_free(). */
void cl_sandbox_free_slot(sbx_plugin_sandbox *sb);
/** *@dst becomes a copy of @src (NULL: NULL): 0, or -1 on no memory
 *  (*@dst NULL). For a constructor's string members. */
int cl_dup(char **dst, const char *src);
/** The sandbox_id slot: the id of a sandbox whose struct starts with a
 *  cl_sandbox (borrowed, lives as long as the sandbox). */
const char *cl_sandbox_id(sbx_plugin_sandbox *sb);
/** The sandbox_root slot of a provider whose sandbox owns "/": "". */
const char *cl_sandbox_root(sbx_plugin_sandbox *sb);

/** Deletes sandbox @id at the provider: 0 also when it was gone already,
 *  -1 with *@error set. @op names the call in errors. */
typedef int (*cl_delete_fn)(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                            const char *op, sbx_error **error);

/*
 * Exposed ports of a provider whose sandbox answers on any port at a
 * preview address (E2B, Tensorlake): the set the library maps, kept in
 * the sandbox's session state ("ports": [N, ...]) so a resumed handle
 * has it. Thread-safe (the gone flag's lock).
 */

/** The create request's ports (none when @rq predates ABI 1.3): their
 *  count, with the array in *@ports. */
size_t cl_request_ports(const sbx_plugin_create_request *rq, const uint16_t **ports);
/** Adds @port (kept ascending, once): 0, or -1 on no memory. */
int cl_ports_add(cl_sandbox *s, unsigned port);
/** Removes @port (nothing when absent). */
void cl_ports_remove(cl_sandbox *s, unsigned port);
/** 1 when @port is exposed, else 0. */
int cl_ports_has(cl_sandbox *s, unsigned port);
/** Adds "ports": [...] to the state object @j (nothing when none). */
void cl_ports_to_state(cl_sandbox *s, struct json_object *j);
/** Reads "ports" of a session state's @data (absent: none): 0, or -1 with
 *  invalid_argument "@provider session state: bad \"ports\"". */
int cl_ports_from_state(cl_sandbox *s, struct json_object *data, const char *provider,
                        const char *op, sbx_error **error);
/** The list_ports answer: the ports as "N N ..." via cl_host->alloc. */
char *cl_ports_list(cl_sandbox *s, const char *op, sbx_error **error);
/** not_found "@provider sandbox @id: port @port is not exposed", context
 *  port; returns the error. */
sbx_error *cl_port_not_exposed(sbx_error **error, cl_sandbox *s, const char *provider,
                               const char *op, unsigned port);

/** The create request's ports (cl_request_ports()) added to @s: 0, or -1
 *  with resource_exhausted (op @op) on no memory. */
int cl_ports_from_request(cl_sandbox *s, const sbx_plugin_create_request *rq, const char *op,
                          sbx_error **error);

/*
 * The port slots of a provider that routes every port of a sandbox itself
 * (E2B, Daytona, Tensorlake), whose sandbox struct starts with a
 * cl_sandbox: the library only keeps the set exposed, no call is made.
 * The provider named in errors is cl_backend (cl_setup()). Thread-safe.
 */

/** The expose_port slot: -1 with cl_gone_error() (op expose_port) when the
 *  sandbox is gone, -1 with resource_exhausted on no memory, else 0 with
 *  @port added (@ctx unused). */
int cl_expose_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                   sbx_error **error);
/** The unexpose_port slot: -1 with cl_gone_error() (op unexpose_port) when
 *  the sandbox is gone, else 0 with @port removed (absent: nothing). */
int cl_unexpose_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                     sbx_error **error);
/** The list_ports slot: NULL with cl_gone_error() (op list_ports) when the
 *  sandbox is gone, else cl_ports_list() (host memory). */
char *cl_list_ports(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error);
/** The port slots of a descriptor whose sandboxes keep their own list of
 *  exposed ports (cl_expose_port(), cl_unexpose_port(), cl_list_ports()),
 *  @resolve its resolve_port slot, in its designated initializer after
 *  CL_PLUGIN_HEAD(). */
#define CL_PORT_SLOTS(resolve)                                                              \
    .expose_port = cl_expose_port, .unexpose_port = cl_unexpose_port,                       \
    .resolve_port = (resolve), .list_ports = cl_list_ports
/** The start of a resolve_port slot: -1 with cl_gone_error() (op
 *  resolve_port) when @s is gone, -1 with cl_port_not_exposed() when @port
 *  is not exposed, else 0. */
int cl_port_resolvable(cl_sandbox *s, unsigned port, sbx_error **error);

/** A copy of @str in host memory (cl_host->alloc; the host frees it), as a
 *  slot returns a string: NULL with resource_exhausted (op @op) on no
 *  memory, and when @str is NULL (from a builder that ran out of memory).
 *  Thread-safe. */
char *cl_host_strdup(const char *str, const char *op, sbx_error **error);

/**
 * The destroy slot's body: 0 at once when @s is gone; else @del (op
 * "destroy"), and on success the gone flag set, so that every later call
 * fails at once and a second destroy sends nothing. -1 with @del's error.
 */
int cl_sandbox_destroy(cl_sandbox *s, sbx_plugin_client *client, cl_delete_fn del,
                       const sbx_call_ctx *ctx, sbx_error **error);

/**
 * The undo of a create that failed after the provider made sandbox @id
 * (op @op): when @sb is NULL (the plugin's struct could not be made),
 * resource_exhausted "out of memory" stored unless an error is stored
 * already (the first stands); then, when @context is non-zero, context
 * sandbox_id=@id added to the stored error.
 * Then @del(@client, NULL, @id, @op, NULL) deletes the sandbox (no
 * deadline, its error dropped: the create's error is the one kept) and
 * @sb is freed with @free_fn (NULL: cl_sandbox_free()). Returns NULL, for
 * the caller's sandbox pointer. Thread-safe as @del is.
 */
void *cl_create_undo(void *sb, sbx_plugin_client *client, cl_delete_fn del, const char *id,
                     int context, void (*free_fn)(sbx_plugin_sandbox *sb), const char *op,
                     sbx_error **error);

/**
 * The answer @r to a call on sandbox @s (of @provider; @what names the
 * call): 0 for a 2xx; -1 for a 404 with @s's gone flag set and
 * cl_gone_error(); -1 with the answer's error (cl_fail_status(),
 * CL_CODE_BY_STATUS) otherwise.
 */
int cl_sandbox_answer(cl_sandbox *s, cl_http *h, const cl_resp *r, const char *provider,
                      const char *op, const char *what, sbx_error **error);

/**
 * The error of a file call on sandbox @s that the provider answered with
 * @r, a status other than 2xx, about the file @path (named as the caller
 * did; @what says what the call wanted there: "file", "directory for
 * file", "directory"). None when @s is gone or *@error already holds an
 * error (the call stored the sandbox's own), nor when no answer came (status
 * 0). Else not_found "no such @what in the sandbox: @path" for a 404; for
 * another status invalid_argument with the answer's message
 * (cl_fail_status(), @what names the call), except that with @by_status
 * only 400, 403 and 422 are invalid_argument and other statuses take their
 * own code (CL_CODE_BY_STATUS); each with context path=@path. Returns -1.
 * Thread-safe.
 */
int cl_file_fail(cl_sandbox *s, cl_http *h, const cl_resp *r, int by_status, const char *op,
                 const char *path, const char *what, sbx_error **error);

/**
 * How a provider reads an answer to a call on one of its sandboxes that is
 * not 2xx (cl_sandbox_refused()): a constant table of the plugin's.
 */
typedef struct cl_call_spec {
    const cl_resume_spec *rs;   /* the provider and its look at a sandbox
                                 * (cl_sandbox_confirm_gone()) */
    unsigned flags;             /* CL_CALLS_* */
} cl_call_spec;
/* A 404 to a call that is not a file call is the sandbox's own: gone at
 * once, without a look (else the look decides). */
#define CL_CALLS_404_GONE 1u
/* Every refusal is looked into (else only a 404): a provider that answers
 * a call on an ended sandbox with another status. */
#define CL_CALLS_LOOK_ANY 2u
/* A file call's 400 is the file's, as its 404 is. */
#define CL_CALLS_FILE_400 4u

/* Per call (cl_sandbox_request()'s @how): a file call, whose 404 (and 400
 * with CL_CALLS_FILE_400) is the file's unless the sandbox is gone: then
 * no error is stored but the gone one (the caller names the file). */
#define CL_CALL_FILE 1u
/* A 408 is an answer too (a hold that ended: the caller asks again). */
#define CL_CALL_OK_408 2u

/**
 * The error of the answer @r, not 2xx, to a call on sandbox @s (whose head
 * has its client), as @cs reads it: the gone flag set and the gone error
 * (as cl_sandbox_confirm_gone() stores it) when the answer or the look
 * says the sandbox ended; else the answer's error (cl_fail_status(),
 * CL_CODE_BY_STATUS, @what), none for a file's 404 (@how CL_CALL_FILE).
 * Returns -1. Thread-safe as @cs->rs->get is.
 */
int cl_sandbox_refused(cl_sandbox *s, cl_http *h, const cl_call_spec *cs,
                       const sbx_call_ctx *ctx, const cl_resp *r, unsigned how, const char *op,
                       const char *what, sbx_error **error);

/**
 * A call on sandbox @s at @url, a string the call takes and frees (NULL,
 * from a builder that ran out of memory: resource_exhausted, nothing
 * sent): -1 with cl_gone_error() (of @cs->rs->provider) at once when @s is
 * gone; else cl_request_at(@h, @ctx, @rq, @url, @r): 0 with a 2xx answer in
 * @r (or a 408 with @how CL_CALL_OK_408), -1 when none came (the call's
 * error) or with cl_sandbox_refused()'s error. Thread-safe.
 */
int cl_sandbox_request(cl_sandbox *s, cl_http *h, const cl_call_spec *cs,
                       const sbx_call_ctx *ctx, cl_req *rq, char *url, unsigned how, cl_resp *r,
                       const char *op, sbx_error **error);

/**
 * cl_sandbox_request() at @s's data plane followed by @path (absolute,
 * with its query: "/process?x=1"), sent through @h; a head without a data
 * plane is as a URL that could not be made (resource_exhausted, nothing
 * sent, after the gone check). Returns as cl_sandbox_request().
 * Thread-safe.
 */
int cl_plane_request(cl_sandbox *s, cl_http *h, const cl_call_spec *cs, const sbx_call_ctx *ctx,
                     cl_req *rq, const char *path, unsigned how, cl_resp *r, const char *op,
                     sbx_error **error);

/**
 * A call on sandbox @s at the provider: -1 with cl_gone_error() (of
 * cl_backend) at once when @s is gone; else cl_item_request(@method,
 * @api, @collection, @s's id, @suffix, @body, @idem) and its answer as
 * cl_sandbox_answer() takes it, except that the status @also_ok (when not
 * 0: one that says it is done already, as a 409 to the pause of a paused
 * sandbox) is 0 too; -1 with the call's error when no answer came.
 */
int cl_sandbox_call(cl_sandbox *s, cl_http *h, const sbx_call_ctx *ctx, const char *method,
                    const char *api, const char *collection, const char *suffix,
                    struct json_object *body, cl_idempotency idem, long also_ok,
                    const char *op, const char *what, sbx_error **error);

/**
 * The is_alive slot's body: 0 at once when @s is gone; else GET @url (the
 * sandbox at the provider; NULL: resource_exhausted): 0 with the gone flag
 * set on a 404, or when the answer's member @state_key (NULL: none looked
 * at) is one of the NULL-terminated @dead states; 1 for any other answer;
 * -1 with the call's error (op is_alive).
 */
int cl_sandbox_is_alive(cl_sandbox *s, cl_http *h, const sbx_call_ctx *ctx, const char *url,
                        const char *state_key, const char *const *dead, sbx_error **error);

/**
 * cl_sandbox_is_alive() through the provider's own GET of one sandbox:
 * 0 at once when @s is gone; else @rs->get(@s's client, ctx, id, op
 * is_alive): 0 with the gone flag set on a 404, or when the answer's
 * member @rs->state_key (NULL: none looked at) is one of @rs->dead; 1 for
 * any other answer; -1 with the get's error. For a provider whose GET is
 * not a plain item URL (a query it adds, an answer it unwraps). Thread-safe
 * as @rs->get is.
 */
int cl_spec_is_alive(cl_sandbox *s, const cl_resume_spec *rs, const sbx_call_ctx *ctx,
                     sbx_error **error);

/** cl_sandbox_is_alive() at cl_item_url(@api, @collection, @s's id, ""):
 *  the is_alive slot of a provider that GETs its sandboxes as items. */
int cl_item_is_alive(cl_sandbox *s, cl_http *h, const sbx_call_ctx *ctx, const char *api,
                     const char *collection, const char *state_key, const char *const *dead,
                     sbx_error **error);

/** Runs the plugin's own short command @cmd in @sb (output discarded): 0
 *  with its exit status in *@code, or -1 with *@error set. */
typedef int (*cl_run_fn)(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                         int *code, const char *op, sbx_error **error);

/**
 * Makes @workdir (absolute) in @sb with "mkdir -p -- WORKDIR" through @run:
 * 0, or -1 with @run's error, or invalid_argument "@provider: cannot make
 * the working directory @workdir (mkdir exited N)" (context path=@workdir)
 * when mkdir failed.
 */
int cl_make_workdir(sbx_plugin_sandbox *sb, cl_run_fn run, const sbx_call_ctx *ctx,
                    const char *provider, const char *workdir, const char *op,
                    sbx_error **error);

/**
 * The create's working directory: nothing (0) when @workdir is NULL or "";
 * else @workdir made in @sb (cl_make_workdir() through @run) and a copy of
 * it stored in *@slot (the sandbox's member, freed with it): 0, or -1 with
 * cl_make_workdir()'s error or resource_exhausted (op @op).
 */
int cl_create_workdir(sbx_plugin_sandbox *sb, char **slot, cl_run_fn run, const sbx_call_ctx *ctx,
                      const char *provider, const char *workdir, const char *op,
                      sbx_error **error);

/**
 * Sets the mode bits (mode & 07777) of the file @path in @sb with "chmod
 * MODE -- PATH" through @run (providers whose upload takes no mode): 0, or
 * -1 with @run's error, or execution_failed "cannot set mode MODE on @shown
 * (chmod exited N)" (context path=@shown) when chmod failed. @shown names
 * the file as the caller did.
 */
int cl_set_mode(sbx_plugin_sandbox *sb, cl_run_fn run, const sbx_call_ctx *ctx, const char *path,
                const char *shown, uint32_t mode, const char *op, sbx_error **error);

/** Uploads what @fd holds (read to its end) to the absolute @path in @sb,
 *  the provider's way: 0, or -1 with *@error set. @shown names the file as
 *  the caller did. */
typedef int (*cl_upload_fn)(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                            int fd, const char *shown, const char *op, sbx_error **error);

/**
 * The write_file slot's body for a provider whose upload takes no mode:
 * @path made absolute against @workdir (cl_path_in(); NULL: as given),
 * @upload of @fd to it, then its mode set to @mode with cl_set_mode()
 * through @run (op write_file). 0, or -1 with resource_exhausted, @upload's
 * or cl_set_mode()'s error. Thread-safe as @upload and @run are.
 */
int cl_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *workdir,
                  const char *path, int fd, uint32_t mode, cl_upload_fn upload, cl_run_fn run,
                  sbx_error **error);


/**
 * The listing of a directory by a command, for a provider without a list
 * call: the command that lists @dir (absolute, as the file calls send it):
 * "test -d DIR || exit 3; find DIR -mindepth 1 -maxdepth 1 -printf
 * '%y %s %f\n'" (GNU find). A new string, NULL on no memory.
 */
char *cl_list_command(const char *dir);

/**
 * That command's answer, exit status @code and stdout @out (NUL-ended; its
 * lines are cut in place): @fn called for each entry ("TYPE SIZE NAME":
 * a directory when TYPE is 'd', its size -1) until it returns non-zero,
 * and 0; -1 with not_found "no such directory in the sandbox: @shown"
 * (status 3) or execution_failed "cannot list @shown (find exited N)",
 * both with context path=@shown.
 */
int cl_list_answer(int code, char *out, const char *shown, sbx_plugin_file_fn fn, void *ud,
                   const char *op, sbx_error **error);

/**
 * One entry of a provider's JSON listing of a directory (@e, a JSON object
 * borrowed for the call) as a file info: name its string member "name"
 * (borrowed from @e; NULL when missing), a directory when @dir is
 * non-zero or else when its flag member @dir_key is true (cl_json_bool();
 * @dir_key NULL: never), size its integer member "size" (-1 when missing,
 * and for a directory), mode the octal digits of its string member
 * @perm_key ("755"; the low 12 bits; 0 when missing or @perm_key is NULL).
 * Pure; thread-safe.
 */
sbx_plugin_file_info cl_file_info_json(struct json_object *e, const char *dir_key, int dir,
                                       const char *perm_key);

/**
 * Hands @fn (with @ud) the file info of each entry of the JSON array @arr
 * (cl_file_info_json(@dir_key, @dir, @perm_key); NULL or not an array:
 * none), in order, passing over those without a name, until @fn returns
 * non-zero. Returns 1 when @fn stopped the listing, else 0. Thread-safe as
 * @fn is.
 */
int cl_file_infos_json(struct json_object *arr, const char *dir_key, int dir,
                       const char *perm_key, sbx_plugin_file_fn fn, void *ud);

/**
 * A plugin's runner of a command whose stdout it keeps: 0 with its exit
 * status in *@code and its stdout (a new NUL-ended string, or NULL when
 * @out is NULL) in *@out; -1 with *@error set when it could not be run.
 */
typedef int (*cl_run_out_fn)(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                             int *code, char **out, const char *op, sbx_error **error);

/**
 * The list_files slot of a provider without a list call (op list_files):
 * @path made absolute against @dir (cl_path_in()), listed by
 * cl_list_command() run by @run, its answer read by cl_list_answer() (the
 * caller's @path shown). 0 after @fn saw each entry, -1 with *@error set
 * (resource_exhausted when out of memory).
 */
int cl_list_files_run(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *dir,
                      const char *path, cl_run_out_fn run, sbx_plugin_file_fn fn, void *ud,
                      sbx_error **error);

/**
 * A plugin's download of the file @path (absolute, as the provider takes
 * it): its raw bytes to @sink (@ud) when the answer is 2xx; 0 with the
 * answer in @r, or -1 with @r's status (0 when no answer came) and, unless
 * the answer says the file is not there, *@error set.
 */
typedef int (*cl_download_fn)(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                              cl_sink_fn sink, void *ud, cl_resp *r, const char *op,
                              sbx_error **error);

/**
 * The read_file slot over a plugin's download (op read_file): @path made
 * absolute against @dir (cl_path_in()), its bytes written to @fd. 0, or -1
 * with *@error set: an answer the download refused is cl_file_fail() of
 * @sb's head (through @h, by the answer, "file", the caller's @path); out
 * of memory is resource_exhausted.
 */
int cl_read_file_by(sbx_plugin_sandbox *sb, cl_http *h, const sbx_call_ctx *ctx, const char *dir,
                    const char *path, cl_download_fn download, int fd, sbx_error **error);

/**
 * The client's config JSON @config_json parsed: 0 with a new object
 * (json_object_put()) in *@cfg, or NULL when @config_json is NULL or "";
 * -1 with configuration "@provider client options must be a JSON object"
 * (op client_new) when it is not one.
 */
int cl_client_config(const char *config_json, const char *provider, struct json_object **cfg,
                     sbx_error **error);

/** A plugin's client_free slot. */
typedef void (*cl_client_free_fn)(sbx_plugin_client *c);

/**
 * The end of a client_new slot begun by cl_client_new(): @cfg put; when
 * @rc is 0, @c stored in *@client and 0; else @c freed with @free_fn and
 * -1 (the error stored already by the step that failed).
 */
int cl_client_end(int rc, sbx_plugin_client *c, sbx_plugin_client **client,
                  struct json_object *cfg, cl_client_free_fn free_fn);

/** The table of a plugin's client head: what cl_client_new() reads and
 *  makes for it, and how cl_client_free_slot() frees it. A static
 *  constant of the plugin, borrowed by every client it makes. */
typedef struct cl_client_spec {
    const char *provider;       /* the backend's name in errors ("e2b") */
    size_t size;                /* sizeof the plugin's client struct, at least
                                 * sizeof(cl_client) */
    const char *url_key;        /* the client option of the base URL
                                 * ("api_url"), or NULL: the plugin sets the
                                 * head's api itself (or has none) */
    const char *url_env;        /* the environment variable of the base URL,
                                 * or NULL: none */
    const char *url_default;    /* the base URL when neither is set; NULL:
                                 * one must be (see url_missing) */
    const char *url_missing;    /* with url_default NULL: the message of the
                                 * configuration error when neither the
                                 * option nor the variable is set (context
                                 * option=url_key) */
    const char *const *key_envs;    /* the credential's environment
                                     * variables, the first non-empty one
                                     * wins (NULL-terminated), or NULL:
                                     * none (cl_http_configure()) */
    const char *auth_header;    /* the credential's header ("Authorization") */
    const char *auth_prefix;    /* before the key in it ("Bearer "), or NULL */
    int key_required;           /* 1: the provider takes no request without
                                 * the credential: with none of key_envs
                                 * set, cl_client_new() marks the http
                                 * (cl_http_set_missing_credential()) so
                                 * that each request fails at once with
                                 * authentication "PROVIDER backend: no
                                 * credential (set VAR[ or VAR]...[key_else])",
                                 * nothing sent; client_new
                                 * itself does not fail, so the backend is
                                 * still listed. The plugin may set the
                                 * credential later (cl_http_set_auth()
                                 * clears the mark). 0: it is optional */
    const char *key_else;       /* with key_required: where else the plugin
                                 * finds one, appended to that message
                                 * (", or api_key in ~/.runpod/config.toml"),
                                 * or NULL */
    cl_reap_find_fn find;       /* the reaper's look-up of a create token
                                 * (its ud is the client), or NULL: no
                                 * reaper */
    cl_reap_delete_op_fn del;   /* the reaper's delete (op "create") */
    void (*clear)(sbx_plugin_client *c);    /* frees the plugin's own members
                                             * (the head's are freed after
                                             * it), also of a client_new that
                                             * failed part-way (members not
                                             * set are zero), or NULL: none */
} cl_client_spec;

/**
 * What every hosted plugin's client starts with (its first member, so that
 * cl_client_free_slot() takes the plugin's sbx_plugin_client), as a
 * cl_sandbox starts its sandbox: the connection pool with the credential,
 * the base URL and the reaper of lost creates. Set up by cl_client_new();
 * the plugin reads it without a lock once client_new returned.
 */
typedef struct cl_client {
    cl_http *http;              /* the client's connections and credential */
    char *api;                  /* the base URL, no trailing slash: a new
                                 * string freed with the head, or NULL (the
                                 * spec's url_key NULL and none set) */
    cl_reaper *reaper;          /* creates whose outcome is unknown, or NULL
                                 * (the spec's find NULL) */
    const cl_client_spec *spec; /* the plugin's table (borrowed) */
} cl_client;

/**
 * The start of a client_new slot with the head its plugin's @spec
 * describes: @config_json parsed (cl_client_config(): a new object, or
 * NULL, in *@cfg for the plugin's own options), a zeroed client struct of
 * @spec->size bytes whose head holds a new cl_http configured from *@cfg
 * and @spec's credential (cl_http_configure(): retry options, key,
 * header), the base URL (cl_base_url() of @spec's key, variable and
 * default), the mark of a credential @spec requires and the environment
 * lacks (see key_required) and a reaper over @spec's find and del. Returns the struct (the
 * caller ends client_new with cl_client_end(..., cl_client_free_slot));
 * NULL with *@cfg NULL and nothing left to free on error: configuration
 * for bad options JSON, a base URL that is not http(s) (named), a missing
 * one (@spec's url_missing), a bad retry option; resource_exhausted on no
 * memory; all with op client_new. Thread-safe.
 */
void *cl_client_new(const cl_client_spec *spec, const char *config_json,
                    struct json_object **cfg, sbx_error **error);

/**
 * The client_free slot of a plugin whose client starts with a cl_client:
 * stops the reaper (after its last look, which may use the plugin's
 * members), calls the spec's clear, then frees the http, the base URL and
 * @c. NULL: nothing. Called once no call uses @c.
 */
void cl_client_free_slot(sbx_plugin_client *c);

/**
 * Defines @name, a static setup slot (sbx_plugin's setup) of the plugin
 * whose backend name is @backend (a string constant): cl_setup(host,
 * @backend), which keeps the host services and the name for errors and
 * log lines and initialises libcurl once. Returns as cl_setup(). Called by
 * the host before any other slot.
 */
#define CL_SETUP(name, backend)                                                             \
    static int name(const sbx_host_services *host, sbx_error **error)                       \
    {                                                                                       \
        return cl_setup(host, (backend), error);                                            \
    }

/**
 * Defines @name, a static probe slot (sbx_plugin_api's probe) of a provider
 * whose capabilities depend neither on the client nor on the call, its
 * client headed by a cl_client: it stores @caps (an SBX_CAP_* mask) in
 * *caps and returns 0, asking the provider nothing; -1 with
 * cl_http_missing_credential()'s error (op probe) when the client lacks
 * the credential its provider requires, so that the backend is shown
 * unavailable and why. Thread-safe.
 */
#define CL_PROBE_CAPS(name, caps_mask)                                                      \
    static int name(sbx_plugin_client *client, const sbx_call_ctx *ctx, uint64_t *caps,     \
                    sbx_error **error)                                                      \
    {                                                                                       \
        (void)ctx;                                                                          \
        if (client && cl_http_missing_credential(((cl_client *)(void *)client)->http,       \
                                                 "probe", error) < 0)                       \
            return -1;                                                                      \
        *caps = (caps_mask);                                                                \
        return 0;                                                                           \
    }

/**
 * Defines @name, a static destroy slot (sbx_plugin's destroy) of a plugin
 * whose sandbox struct starts with a cl_sandbox @s whose client is @s.c:
 * cl_sandbox_destroy(&sb->s, sb->s.c, @del, ctx, error). Returns as
 * cl_sandbox_destroy(). Thread-safe as @del is.
 */
#define CL_DESTROY(name, del)                                                               \
    static int name(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)     \
    {                                                                                       \
        return cl_sandbox_destroy(&sb->s, sb->s.c, (del), ctx, error);                      \
    }

/**
 * Defines @name, a static destroy_by_id slot (sbx_plugin's destroy_by_id)
 * of a provider whose delete of sandbox @id (a cl_delete_fn) is all it
 * takes: @del(client, ctx, id, "destroy_by_id", error). Returns as @del
 * (0 also when the sandbox was gone already). Thread-safe as @del is.
 */
#define CL_DESTROY_BY_ID(name, del)                                                         \
    static int name(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,     \
                    sbx_error **error)                                                      \
    {                                                                                       \
        return (del)(client, ctx, id, "destroy_by_id", error);                              \
    }

/**
 * Defines @name, a static cl_reap_find_fn (the reaper's look-up, cloud.h)
 * of a provider whose listing @list(client, ctx, item_fn, item_ud, op,
 * error) calls the plugin's item callback on each sandbox: @list(ud, ctx,
 * @one, &t, "create", error), @one the callback that gives the item's
 * token and id to cl_token_ids_match() on its @ud, the cl_token_ids @t,
 * then cl_ids_finish(). Returns as cl_ids_finish(). Thread-safe as @list
 * is.
 */
#define CL_FIND_TOKEN(name, list, one)                                                      \
    static int name(void *ud, const sbx_call_ctx *ctx, const char *token, char ***ids,      \
                    sbx_error **error)                                                      \
    {                                                                                       \
        cl_token_ids t = { token, { 0 } };                                                  \
        int rc = (list)(ud, ctx, (one), &t, "create", error);                               \
        return cl_ids_finish(&t.ids, rc, ids, "create", error);                             \
    }

/**
 * Defines two static functions of a provider whose listing filters its
 * sandboxes by one label, @list(client, ctx, key, value, item_fn, item_ud,
 * op, error) calling a cl_listed_fn on each sandbox whose label @key is
 * @value, its items holding their id in the string member @id_key, their
 * labels in the object member @labels_key and their creation time in the
 * RFC 3339 member @created_key (NULL: none):
 *  - @p_find_token, a cl_reap_find_fn (the reaper's look-up, cloud.h): the
 *    ids of the sandboxes labelled CL_META_TOKEN=token (cl_ids_listed(),
 *    cl_ids_finish(), op create);
 *  - @p_list_owned, the list_owned slot: the sandboxes labelled
 *    CL_META_BACKEND=@backend handed to the host's callback
 *    (cl_owned_listed(), op list_owned).
 * Both return 0, or -1 with *error set. Thread-safe as @list is.
 */
#define CL_LABEL_LISTING(p, list, backend, id_key, labels_key, created_key)                 \
    static int p##_find_token(void *ud, const sbx_call_ctx *ctx, const char *token,         \
                              char ***ids, sbx_error **error)                               \
    {                                                                                       \
        cl_listed_ids s = { { 0 }, (id_key) };                                              \
        int rc = (list)(ud, ctx, CL_META_TOKEN, token, cl_ids_listed, &s, "create", error); \
        return cl_ids_finish(&s.ids, rc, ids, "create", error);                             \
    }                                                                                       \
    static int p##_list_owned(sbx_plugin_client *client, const sbx_call_ctx *ctx,           \
                              sbx_plugin_owned_fn fn, void *ud, sbx_error **error)          \
    {                                                                                       \
        cl_owned o = { fn, ud, (id_key), (labels_key), (created_key) };                     \
        return (list)(client, ctx, CL_META_BACKEND, (backend), cl_owned_listed, &o,         \
                      "list_owned", error);                                                 \
    }

/**
 * Defines @name, a static cl_get_fn of a provider that GETs its sandbox @id
 * as an item of its API, its client starting with a cl_client @cl:
 * cl_item_get(c->cl.http, ctx, c->cl.api, @collection, id, status, op,
 * @what, error). Returns as cl_item_get() (a new object, or NULL with
 * *status 0 when no answer came, an error stored unless it is 404).
 * Thread-safe.
 */
#define CL_ITEM_GET(name, collection, what)                                                 \
    static struct json_object *name(sbx_plugin_client *c, const sbx_call_ctx *ctx,          \
                                    const char *id, long *status, const char *op,           \
                                    sbx_error **error)                                      \
    {                                                                                       \
        return cl_item_get(c->cl.http, ctx, c->cl.api, (collection), id, status, op,        \
                           (what), error);                                                  \
    }

/**
 * Defines @name, a static cl_delete_fn of a provider that DELETEs its
 * sandbox @id as an item of its API, its client starting with a cl_client
 * @cl: cl_item_delete(c->cl.http, ctx, c->cl.api, @collection, id, op,
 * @what, error). Returns as cl_item_delete() (0 also when it was gone
 * already). Thread-safe.
 */
#define CL_ITEM_DELETE(name, collection, what)                                              \
    static int name(sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,          \
                    const char *op, sbx_error **error)                                      \
    {                                                                                       \
        return cl_item_delete(c->cl.http, ctx, c->cl.api, (collection), id, op, (what),     \
                              error);                                                       \
    }

/**
 * Defines @name, a static is_alive slot of a provider that GETs its
 * sandbox as an item of @collection, its sandbox struct starting with a
 * cl_sandbox @s whose client starts with a cl_client @cl:
 * cl_item_is_alive(&sb->s, http, ctx, api, @collection, @state_key,
 * @dead, error), @state_key and @dead (a NULL-terminated array of the
 * plugin's) NULL when the answer's state is not looked at. Returns as
 * cl_item_is_alive(). Thread-safe.
 */
#define CL_ITEM_IS_ALIVE(name, collection, state_key, dead)                                 \
    static int name(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)     \
    {                                                                                       \
        return cl_item_is_alive(&sb->s, sb->s.c->cl.http, ctx, sb->s.c->cl.api,             \
                                (collection), (state_key), (dead), error);                  \
    }

/**
 * Defines @name, a static is_alive slot of a provider whose sandbox struct
 * starts with a cl_sandbox @s: cl_spec_is_alive(&sb->s, @spec, ctx, error),
 * @spec the plugin's constant cl_resume_spec (its get, state_key and dead).
 * Returns as cl_spec_is_alive(). Thread-safe as the spec's get is.
 */
#define CL_SPEC_IS_ALIVE(name, spec)                                                        \
    static int name(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)     \
    {                                                                                       \
        return cl_spec_is_alive(&sb->s, (spec), ctx, error);                                \
    }

/**
 * Defines @name, a static session_state slot of a provider whose session
 * state holds the sandbox's id alone (and its workdir), its sandbox struct
 * starting with a cl_sandbox @s: {"version": @version, @id_key: ID[,
 * "workdir": W]} (cl_state_new(), cl_state_end()): no credential, no env
 * value. Returns a string in host memory, or NULL with cl_gone_error() when
 * the sandbox is gone, or resource_exhausted. Thread-safe.
 */
#define CL_ID_SESSION_STATE(name, backend, version, id_key)                                 \
    static char *name(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)   \
    {                                                                                       \
        (void)ctx;                                                                          \
        return cl_state_end(cl_state_new(&sb->s, (backend), (version), (id_key), error),    \
                            error);                                                         \
    }

/**
 * Defines @name, a static data-plane call of a provider whose sandbox
 * struct starts with a cl_sandbox @s with a data plane, its client
 * starting with a cl_client @cl: int @name(sb, ctx, rq, path, r,
 * file_call, op, error) is cl_plane_request(&sb->s, sb->s.c->cl.http,
 * @calls, ctx, rq, path, CL_CALL_FILE when file_call is non-zero, r, op,
 * error), @calls the plugin's constant cl_call_spec. Returns as
 * cl_plane_request(). Thread-safe.
 */
#define CL_PLANE_CALL(name, calls)                                                          \
    static int name(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, cl_req *rq,            \
                    const char *path, cl_resp *r, int file_call, const char *op,            \
                    sbx_error **error)                                                      \
    {                                                                                       \
        return cl_plane_request(&sb->s, sb->s.c->cl.http, (calls), ctx, rq, path,           \
                                file_call ? CL_CALL_FILE : 0, r, op, error);                \
    }

/**
 * The members every hosted plugin's descriptor (a constant sbx_plugin)
 * starts with, in its designated initializer: struct_size, abi_major and
 * abi_minor of this build, name @backend (a string constant), version
 * PACKAGE_VERSION, and the slots the base fills alike for every plugin
 * whose client starts with a cl_client, whose sandbox struct starts with
 * a cl_sandbox and whose processes start with a cl_proc: client_free
 * (cl_client_free_slot()), sandbox_id (cl_sandbox_id()), sandbox_root
 * (cl_sandbox_root()) and exec_event_fd (cl_exec_event_fd()). The
 * plugin's initializer names none of these again (a member named twice is
 * a -Woverride-init warning, an error with --enable-werror).
 */
#define CL_PLUGIN_HEAD(backend)                                                             \
    .struct_size = sizeof(sbx_plugin), .abi_major = SBX_PLUGIN_ABI_MAJOR,                   \
    .abi_minor = SBX_PLUGIN_ABI_MINOR, .name = (backend), .version = PACKAGE_VERSION,       \
    .client_free = cl_client_free_slot, .sandbox_id = cl_sandbox_id,                        \
    .sandbox_root = cl_sandbox_root, .exec_event_fd = cl_exec_event_fd

/**
 * The slots every hosted plugin fills with its own functions, named by its
 * prefix @p: setup, client_new, probe, create, resume, session_state,
 * destroy, is_alive, exec_start, list_files, read_file, write_file,
 * list_owned and destroy_by_id, each the plugin's static function @p_SLOT
 * (bl_create for prefix bl), in its descriptor's designated initializer
 * after CL_PLUGIN_HEAD(). The slots a plugin fills otherwise (snapshot,
 * stop, the ports...) it names itself.
 */
#define CL_PLUGIN_SLOTS(p)                                                                  \
    .setup = p##_setup, .client_new = p##_client_new, .probe = p##_probe,                   \
    .create = p##_create, .resume = p##_resume, .session_state = p##_session_state,         \
    .destroy = p##_destroy, .is_alive = p##_is_alive, .exec_start = p##_exec_start,         \
    .list_files = p##_list_files, .read_file = p##_read_file,                               \
    .write_file = p##_write_file, .list_owned = p##_list_owned,                             \
    .destroy_by_id = p##_destroy_by_id

/**
 * Defines sbx_plugin_init(), the entry point the host looks up in the
 * plugin's module, returning @desc (the address of the plugin's constant
 * descriptor). Once per plugin; thread-safe.
 */
#define CL_PLUGIN_EXPORT(desc)                                                              \
    SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void);                              \
    SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void)                               \
    {                                                                                       \
        return (desc);                                                                      \
    }

/**
 * Sets @h's retry policy from @cfg (cl_retry_policy_from_config() over
 * CL_RETRY_POLICY_DEFAULT; @cfg may be NULL) and its credential: the first
 * non-empty of the environment variables @key_envs (cl_credential()), sent
 * as "@header: @prefixKEY" (@prefix NULL: the key alone) and scrubbed from
 * every message (cl_http_set_secret()); no key, no credential header. 0, or
 * -1 with configuration (a bad retry option, named) or resource_exhausted.
 * Not thread-safe: call before requests.
 */
int cl_http_configure(cl_http *h, struct json_object *cfg, const char *const *key_envs,
                      const char *header, const char *prefix, sbx_error **error);

/**
 * The error of a create option @option (set to @value, which may be NULL)
 * that the provider cannot honour: configuration "@provider backend: @option
 * @value: @why" (" @value" left out when NULL), context option=@option, op
 * create. Returns it (also in *@error when @error wants one).
 */
sbx_error *cl_refuse(sbx_error **error, const char *provider, const char *option,
                     const char *value, const char *why);

/** One create option a provider cannot honour, and why: an entry of the
 *  table cl_refuse_options() checks. */
typedef struct cl_unsupported {
    const char *option;     /* "cpu", "memory_mb", "disk_mb", "gpu", "image",
                             * "template", "snapshot_id", "app_name" or
                             * "allow_internet"; NULL ends the table */
    const char *why;        /* cl_refuse()'s @why */
} cl_unsupported;

/**
 * The create's refusals by table: the first option of @table (in its
 * order) that @rq gives is refused with cl_refuse(@provider, option,
 * value, why) and -1 returned; 0 when it gives none. A string option
 * (gpu, image, template, snapshot_id, app_name) is given when it is not
 * NULL or empty, its value as it is; cpu (value "%g"), memory_mb and
 * disk_mb (integers) when their SBX_OPTION_* bit is set; allow_internet
 * when it is 0 (value "false"). An option not named above is
 * invalid_argument naming it (a table to fix). Thread-safe.
 */
int cl_refuse_options(const sbx_plugin_create_request *rq, const char *provider,
                      const cl_unsupported *table, sbx_error **error);

/**
 * The provider-side lifetime of a create (CASE-33: always set), in whole
 * seconds: @rq's timeout_secs rounded up, plus @margin_s (the provider
 * ends the sandbox that much after the library's own end, so that a
 * command cut by the lifetime is reported timed out, not lost with it);
 * @dflt_s when @rq sets none. -1 with cl_refuse(@provider, "timeout_secs",
 * VALUE, "must be more than 0") for a timeout that is not above 0.
 * Thread-safe.
 */
long long cl_lifetime_s(const sbx_plugin_create_request *rq, const char *provider,
                        long long dflt_s, long long margin_s, sbx_error **error);

/** The bounds a provider puts on one number option of a create: an entry
 *  of the table cl_limits_check() reads. Bounds are in the option's own
 *  unit as the request holds it: vCPUs (cpu), MiB (memory_mb, disk_mb),
 *  seconds (timeout_secs). */
typedef struct cl_limit {
    const char *option;     /* "cpu", "memory_mb", "disk_mb" or
                             * "timeout_secs"; NULL ends the table */
    double min;             /* the least value taken (CL_LIMIT_ABOVE: the
                             * value must be more than it) */
    double max;             /* the most taken; 0: no upper bound */
    double step;            /* the value is a whole multiple of it; 0: any */
    unsigned flags;         /* CL_LIMIT_* */
    const char *why;        /* cl_refuse()'s @why */
    const char *min_key;    /* context key for @min of a refusal ("min_mb"),
                             * or NULL for none; likewise: */
    const char *max_key;
    const char *step_key;
} cl_limit;
#define CL_LIMIT_ABOVE 1u       /* min itself is refused: more than min */
#define CL_LIMIT_ALWAYS 2u      /* checked even when set_fields does not
                                 * name it (timeout_secs, which always has
                                 * a value) */
#define CL_LIMIT_ZERO_NONE 4u   /* 0 is taken as "none", whatever the bounds */

/**
 * The create's number options checked by @table, in its order: an entry
 * whose option @rq sets (its SBX_OPTION_* bit in set_fields, or always
 * with CL_LIMIT_ALWAYS) with a value outside its bounds (below min, or not
 * above it with CL_LIMIT_ABOVE; above max when max > 0; not a whole
 * multiple of step when step > 0; NaN is outside every bound) is refused
 * with cl_refuse(@provider, option, VALUE, why), VALUE "%lld" for
 * memory_mb and disk_mb and, for cpu and timeout_secs, the value exactly:
 * a whole number below 1e15 in digits alone ("1000000"), else the
 * shortest "%g" form of 6 to 17 significant digits that reads back as it
 * ("86400.01", "nan"); plus the context min_key=min, max_key=max and
 * step_key=step (written alike) of the keys the entry names; -1 then. 0 when every value is in bounds. An option not named
 * above is invalid_argument naming it (a table to fix). Stores nothing
 * else; thread-safe.
 */
int cl_limits_check(const sbx_plugin_create_request *rq, const char *provider,
                    const cl_limit *table, sbx_error **error);

/**
 * Reads a create's gpu option, "TYPE" or "TYPE:COUNT": 0 with *@type_len
 * the length of TYPE (the bytes before the first ':') and *@count the
 * COUNT (1 when none is given), when TYPE is one of @known (a
 * NULL-terminated list, matched exactly, case counting) or, with @known
 * NULL, 1 to 63 ASCII letters, digits and '-', and COUNT is a decimal
 * number from 1 to @max_count (as strtol() reads it, nothing after it).
 * -1 otherwise, *@type_len and *@count left alone and no error stored:
 * the caller refuses it in its provider's words (cl_refuse()). @gpu NULL
 * is -1. Pure; thread-safe.
 */
int cl_gpu_parse(const char *gpu, const char *const *known, long max_count, size_t *type_len,
                 long *count);

/**
 * The create's backend_options for a provider that takes none: 0 when
 * @rq has none (NULL or ""); else -1 with configuration "@provider
 * backend_options: JSON is not a JSON object", or "@provider
 * backend_options: unknown key \"K\" (the @provider backend takes no
 * backend options)" for the first key of an object, context
 * option=backend_options (and name=K), op create. Thread-safe.
 */
int cl_no_backend_options(const sbx_plugin_create_request *rq, const char *provider,
                          sbx_error **error);

/** One backend option (or client option) a provider takes: an entry of
 *  the table cl_backend_options() (or cl_client_options()) reads. */
typedef struct cl_option {
    const char *key;        /* its name ("suspendable"); NULL ends the table */
    unsigned type;          /* CL_OPTION_* */
    long long max;          /* CL_OPTION_COUNT: the largest value taken */
    void *to;               /* where its value goes when it is given (left
                             * alone when not): an int * (CL_OPTION_BOOL: 1
                             * or 0), a char ** (CL_OPTION_STRING: a new
                             * string, the caller's to free; NULL before) or
                             * a long long * (CL_OPTION_COUNT); NULL:
                             * checked, not stored (cl_client_options) */
} cl_option;
#define CL_OPTION_BOOL 1u       /* true or false */
#define CL_OPTION_STRING 2u     /* a non-empty string, no control characters */
#define CL_OPTION_COUNT 3u      /* a whole number from 1 to max */

/**
 * The create's backend_options read by @table (the provider's options, in
 * the order its "known" list names them): 0 when @rq has none (NULL or "")
 * or when each key of the object is one of @table's with a value of its
 * type, every value given then stored in its entry's @to. Else -1 with
 * configuration (op create, context option=backend_options), nothing
 * stored: "@provider backend_options: JSON is not a JSON object"; for the
 * first key (in the object's order) that is not in @table, "@provider
 * backend_options: unknown key \"K\" (known: \"A\", \"B\")" with context
 * name=K and known=the list; for the first value not of its type,
 * "@provider backend_options: K VALUE is not true or false" (or "a
 * non-empty string", or "a whole number from 1 to MAX"), VALUE as JSON,
 * context name=K. resource_exhausted on no memory (nothing stored).
 * Thread-safe.
 */
int cl_backend_options(const sbx_plugin_create_request *rq, const char *provider,
                       const cl_option *table, sbx_error **error);

/**
 * The client options of @table in the client's config JSON @config (NULL:
 * none; the keys @table does not name are left to the caller): 0 when each
 * one given is of its type, every value given then stored in its entry's
 * @to (NULL: none stored; a string is a new string, the caller's to free,
 * and the caller's value stays where the option is not given). Else -1,
 * nothing stored: configuration (op client_new, context option=KEY) for
 * the first entry of @table, in its order, whose value is not of its type,
 * "BACKEND client option KEY VALUE is not true or false" (or "a non-empty
 * string", or "a whole number from 1 to MAX"), BACKEND cl_backend and VALUE
 * as JSON; resource_exhausted on no memory. Thread-safe.
 */
int cl_client_options(struct json_object *config, const cl_option *table, sbx_error **error);

/** One item of a listing (a JSON object, borrowed for the call): 0 to go
 *  on, non-zero to stop the listing. */
typedef int (*cl_listed_fn)(void *ud, struct json_object *item);

/** How a provider pages its list call (cl_list_pages()). */
typedef struct cl_pages {
    const char *url;            /* the first page: an absolute URL with its
                                 * query (filter, page size); NULL (from a
                                 * builder that ran out of memory):
                                 * resource_exhausted, nothing sent */
    const char *token_param;    /* a later page is @url + "&" + this + "=" +
                                 * the token (percent-encoded) */
    const char *token_header;   /* the next page's token is this answer
                                 * header ("X-Next-Token"), or NULL */
    const char *token_key;      /* else this string member of the answer
                                 * ("nextCursor"; a dotted path names a
                                 * nested one: "meta.nextCursor"); no
                                 * token: the last page */
    const char *items_key;      /* the array member holding the items
                                 * ("items"; absent: none); NULL: the
                                 * answer is the array itself (else an
                                 * error) */
    const char *what;           /* for messages ("list sandboxes") */
    unsigned flags;             /* CL_PAGES_* (0: none) */
} cl_pages;

/* An answer that is itself an array is the page's items (and the last
 * page), whatever @items_key says. */
#define CL_PAGES_ARRAY_TOO 1u
/* A page without items is the last, whatever its token. */
#define CL_PAGES_EMPTY_ENDS 2u

/**
 * Reads every page (up to 1000) of the listing @pg, GETs (safe calls,
 * retried), and calls @fn on each item until it gives non-zero (no more
 * pages are read then). 0, or -1 with *@error set: the call's error, a
 * status other than 200 (cl_fail_status()), an answer that is not JSON,
 * connection "@provider list answered with no array" (@provider being
 * cl_backend) when the answer should be an array and is not, or
 * resource_exhausted. Thread-safe.
 */
int cl_list_pages(cl_http *h, const sbx_call_ctx *ctx, const cl_pages *pg, cl_listed_fn fn,
                  void *ud, const char *op, sbx_error **error);

/**
 * One page of a listing whose next page the plugin works out itself (from
 * the last item, or a number of the answer's; cl_list_pages() serves a
 * token): cl_get_json(@url) (a safe call, retried; @what names it), @url a
 * string the call takes and frees (NULL, from a builder that ran out of
 * memory: resource_exhausted, nothing sent). Returns the answer (a new
 * object, json_object_put()) with *@items its array member @items_key
 * (borrowed from the answer), or NULL with *@error set: the call's or the
 * answer's error, not_found "@provider: no @noun list at @api" on a 404,
 * connection "@provider list answered with no @items_key array" when that
 * member is missing or not an array (@provider being cl_backend).
 * Thread-safe.
 */
struct json_object *cl_list_page(cl_http *h, const sbx_call_ctx *ctx, char *url, const char *api,
                                 const char *noun, const char *items_key,
                                 struct json_object **items, const char *op, const char *what,
                                 sbx_error **error);

/**
 * The ownership labels a create carries (CL_META_*, reap.c), in this
 * order: CL_META_BACKEND=@backend, CL_META_TOKEN=@ctx's create token
 * (left out when @ctx has none), CL_META_EXPIRES=@expires_at as whole
 * UNIX seconds (left out when it is <= 0). A new JSON object
 * (json_object_put()). Thread-safe.
 */
struct json_object *cl_meta_labels(const sbx_call_ctx *ctx, const char *backend,
                                   double expires_at);

/** An RFC 3339 time ("2026-08-21T10:00:00.123Z") as UNIX seconds, the
 *  fraction kept; the zone is not read (the providers write UTC). 0 when
 *  @s is NULL or does not start with such a time. */
double cl_rfc3339(const char *s);

/** What a list_owned slot hands its listing (a cl_listed_fn's @ud for
 *  cl_owned_listed()): the host's callback, and where a listed item holds
 *  its id, its labels and its creation time. A plugin whose own item
 *  callback reads its items sets @fn and @ud alone (the keys NULL). */
typedef struct cl_owned {
    sbx_plugin_owned_fn fn;
    void *ud;
    const char *id_key;         /* the id's string member ("id") */
    const char *labels_key;     /* the labels' object member ("labels") */
    const char *created_key;    /* an RFC 3339 member ("startedAt"), or NULL:
                                 * created_at 0 */
} cl_owned;

/**
 * A cl_listed_fn over a cl_owned @ud: one listed sandbox as list_owned
 * gives it, its id, and from its labels the create token and the expiry
 * (CL_META_TOKEN, CL_META_EXPIRES as decimal UNIX seconds; 0 when absent),
 * with its creation time (cl_rfc3339()), handed to the callback. An item
 * without an id or a token (not made by libsbx) is passed over: 0. Else
 * the callback's answer (non-zero stops the listing).
 */
int cl_owned_listed(void *ud, struct json_object *item);

/**
 * Hands @fn (with @ud) the sbx_plugin_owned_info of sandbox @id whose
 * ownership labels are @labels (CL_META_*; a JSON object borrowed for the
 * call, NULL: none): its create token, its expiry (CL_META_EXPIRES as
 * decimal UNIX seconds; 0 when absent) and @created (UNIX seconds; 0:
 * unknown). Passes over (0, @fn not called) a sandbox without an @id or a
 * token, and one whose CL_META_BACKEND is not @backend when @backend is
 * not NULL (a listing not filtered by backend). Else what @fn gives
 * (non-zero stops the listing). Thread-safe as @fn is.
 */
int cl_owned_report(sbx_plugin_owned_fn fn, void *ud, const char *id, struct json_object *labels,
                    double created, const char *backend);

/** The exec_wait slot of a plugin whose process struct starts with a
 *  cl_proc: cl_proc_wait() with op exec_wait (@ctx unused). */
int cl_exec_wait(sbx_plugin_process *process, const sbx_call_ctx *ctx, int timeout_ms,
                 int *exit_code, sbx_error **error);
/** The exec_event_fd slot of such a plugin: cl_proc_event_fd(). */
int cl_exec_event_fd(sbx_plugin_process *process);

/**
 * The checks an exec_start slot makes first (op exec): -1 with
 * cl_gone_error() when @s is gone; -1 with feature_not_supported
 * "@provider backend: commands on a terminal are not supported" when @rq
 * asks for a terminal; unless @per_command_user, -1 with
 * feature_not_supported "@provider backend: commands run as the sandbox's
 * user; user U cannot be chosen per command" (context user) when @rq names
 * a user. Else 0.
 */
int cl_exec_check(cl_sandbox *s, const char *provider, const sbx_plugin_exec_request *rq,
                  int per_command_user, sbx_error **error);

/**
 * cl_exec_check() for a provider that runs commands on a terminal: the
 * same checks, except that a request with tty_rows and tty_cols both > 0
 * passes (the host has checked them against SBX_TTY_MAX); one of them 0
 * and not the other is invalid_argument naming the size (context size).
 */
int cl_exec_check_pty(cl_sandbox *s, const char *provider, const sbx_plugin_exec_request *rq,
                      int per_command_user, sbx_error **error);

/**
 * The end of a create whose request got no answer (the request call gave
 * -1 with its error in cl_last(), none stored for the caller): the error
 * stored in *@error again (@op), its code cancelled made timeout when the
 * call's deadline (@ctx) had passed, its outcome unknown when the request
 * may have reached the provider; and then, when it may have and @token
 * (the create token the sandbox carries) is not NULL, cl_reap_lost(@reaper,
 * @token): the sandbox the provider may still make is looked for and
 * deleted (CASE-20). Returns the error. On the calling thread.
 */
sbx_error *cl_create_unanswered(cl_reaper *reaper, const sbx_call_ctx *ctx, const char *token,
                                const char *op, sbx_error **error);

/**
 * The error code of a create answered @status (not 2xx): configuration for
 * a 4xx other than 401, 403, 408 and 429 (the provider refused what was
 * asked), else CL_CODE_BY_STATUS (cl_fail_status(): 401/403
 * authentication, 408 timeout, 429 rate_limited, 5xx connection). Pure.
 */
sbx_error_code cl_create_refused_code(long status);

/**
 * The create request of a provider whose create is one POST answered with
 * the new sandbox: POST @url (NULL: resource_exhausted) with @body (JSON),
 * sent once (CL_UNSAFE), op create. Returns the answer's JSON (a new
 * object, json_object_put()) with the id, its string member @id_key (a
 * dotted path names a nested one: "sandbox.id"), in *@id (borrowed from
 * it). Else NULL with *@error set, and whatever the
 * provider may have made looked for by @ctx's create token (when it has
 * one) and deleted through @reaper (CASE-20):
 *  - no answer: cl_create_unanswered() (reaped when it may have acted);
 *  - a status other than 2xx: cl_create_refused_code()'s code
 *    (cl_fail_status(), @what); reaped when the answer says
 *    the provider may have acted (5xx);
 *  - an answer that is not JSON, or without @id_key (creation_failed
 *    "@provider create answered without @id_noun", @provider being
 *    cl_backend): cl_reap_now() with 5 s of its own.
 * Thread-safe.
 */
struct json_object *cl_create_post(cl_http *h, cl_reaper *reaper, const sbx_call_ctx *ctx,
                                   const char *url, struct json_object *body,
                                   const char *id_key, const char *id_noun, const char *what,
                                   const char **id, sbx_error **error);

/** The ids a listing collects (the reaper's look-up, cloud.h): start from
 *  { 0 }. Not thread-safe. */
typedef struct cl_ids {
    char **v;       /* NULL-terminated once one is added; NULL before */
    size_t n;
} cl_ids;

/** Appends a copy of @id to @s (NULL @id: nothing): 0, or -1 on no memory
 *  (@s keeps what it had). */
int cl_ids_add(cl_ids *s, const char *id);

/** The ids of a listing's items (cl_listed_fn items): start from { { 0 },
 *  KEY }. Not thread-safe. */
typedef struct cl_listed_ids {
    cl_ids ids;
    const char *id_key;     /* the id's string member ("id") */
} cl_listed_ids;

/** A cl_listed_fn over a cl_listed_ids @ud: adds the item's id (an item
 *  without one adds nothing, and so does a copy that cannot be made, as
 *  cl_ids_add()). Always 0: the listing goes on. */
int cl_ids_listed(void *ud, struct json_object *item);

/** The ids of the items carrying one create token, as the reaper's
 *  look-up collects them: start from { TOKEN, { 0 } }. Not thread-safe. */
typedef struct cl_token_ids {
    const char *token;  /* borrowed */
    cl_ids ids;
} cl_token_ids;

/** Adds a copy of @id to @t when @item_token (NULL: none) is @t's token:
 *  0, also when it is not (a listing's callback goes on); -1 on no
 *  memory. */
int cl_token_ids_match(cl_token_ids *t, const char *item_token, const char *id);

/**
 * Ends a listing whose result was @rc: when 0, *@ids gets the ids (an
 * empty array when none; the caller frees it with cl_strv_free()) and 0 is
 * returned; when -1 (its error stored), or on no memory (resource_exhausted
 * with @op), the ids are freed and -1 returned. @s is empty afterwards.
 */
int cl_ids_finish(cl_ids *s, int rc, char ***ids, const char *op, sbx_error **error);

/**
 * The end of an exec_start slot, once the caller made what its command
 * needs (@made: 0 when something could not be made): *@stdin_fd becomes a
 * close-on-exec dup of rq->stdin_fd (left alone when the request has none),
 * then @p starts with @run and @ud on rq's stdout and stderr
 * (cl_proc_start()). 0 when started; else -1 with resource_exhausted
 * "cannot start the command: REASON" or cl_proc_start()'s error, and the
 * caller frees what it made, *@stdin_fd included when it is >= 0.
 */
int cl_exec_launch(cl_proc *p, cl_proc_run_fn run, void *ud, int made,
                   const sbx_plugin_exec_request *rq, int *stdin_fd, const char *op,
                   sbx_error **error);

/** Sets a context pair (@key=@value, both copied, cut to fit) of @p's
 *  failure, which exec_wait hands out: the value of a pair with that key
 *  is replaced, else the pair is added (up to CL_PROC_CTX_MAX pairs; past
 *  that it is dropped). On the worker thread, after cl_proc_fail() or
 *  cl_proc_fail_last(). */
void cl_proc_context(cl_proc *p, const char *key, const char *value);

/** The context of a gone sandbox on @p's failure, as cl_gone_error() gives
 *  it: reason=gone and sandbox_id=@id (NULL: no id). The gone error made
 *  on the worker thread reaches exec_wait through cl_proc_fail_last(),
 *  which keeps its code and message but not its context. On the worker
 *  thread, after cl_proc_fail_last(). */
void cl_proc_gone(cl_proc *p, const char *id);

/** cl_proc_fail_last(), with cl_proc_gone()'s context (reason=gone and
 *  sandbox_id) when sandbox @s is gone (its flag set by the call that
 *  failed). On the worker thread. */
void cl_proc_fail_in(cl_proc *p, cl_sandbox *s);

/**
 * The exec_wait slot's body for a command run as @script (cl_shell_script()
 * with a cwd) in @sb, whose process struct starts with a cl_proc:
 * cl_exec_wait(); then, when the command exited CL_CWD_MISSING_EXIT, "test
 * -d CWD" through @run (bounded by 30 s) and, when the directory is
 * missing, -1 with cl_cwd_missing_error() (op exec). Otherwise as
 * cl_proc_wait(): 1 with *@exit_code when it ended, 0 when @timeout_ms
 * passed, -1 with *@error set.
 */
int cl_exec_wait_script(sbx_plugin_process *process, sbx_plugin_sandbox *sb,
                        const char *script, cl_run_fn run, int timeout_ms, int *exit_code,
                        sbx_error **error);

/**
 * Signals @sig to every process of @sb carrying CL_EXEC_MARK=@tag:
 * cl_mark_kill_command(@tag, @sig) through @run (op exec_kill), whether or
 * not the command was seen to end: 0, or -1 with @run's error
 * (resource_exhausted for a @tag it refuses, or no memory). The exit
 * status of the scan is not looked at (it exits 0). Thread-safe as @run is.
 */
int cl_mark_kill(sbx_plugin_sandbox *sb, cl_run_fn run, const sbx_call_ctx *ctx,
                 const char *tag, int sig, sbx_error **error);

/**
 * The exec_kill slot's body for a command whose processes carry
 * CL_EXEC_MARK=@tag: 0 at once when @p has ended; else cl_mark_kill().
 */
int cl_proc_mark_kill(cl_proc *p, sbx_plugin_sandbox *sb, cl_run_fn run,
                      const sbx_call_ctx *ctx, const char *tag, int sig, sbx_error **error);

/**
 * The exec_resize slot's body for a command on a terminal whose processes
 * carry CL_EXEC_MARK=@tag, on a provider with no resize call: 0 at once
 * when @p has ended; else cl_mark_resize_command(@tag, @rows, @cols)
 * through @run (op exec_resize): 0 once the size is set (or the command
 * ended meanwhile); -1 with @run's error, or execution_failed naming the
 * size (context size ROWSxCOLS) when no process of the command had a
 * terminal or stty failed.
 */
int cl_proc_mark_resize(cl_proc *p, sbx_plugin_sandbox *sb, cl_run_fn run,
                        const sbx_call_ctx *ctx, const char *tag, unsigned rows, unsigned cols,
                        sbx_error **error);

/**
 * The check at the start of an exec_resize slot: 0 when the process was
 * started on a terminal (@tty_rows, its rows at the start, > 0); else -1
 * with invalid_argument "the process has no terminal to resize" (op
 * exec_resize). Thread-safe.
 */
int cl_resize_check(unsigned tty_rows, sbx_error **error);

/**
 * One step of an exec_resize slot's wait, @lock held, for what the resize
 * needs (the terminal's connection, the process's id) within @b:
 * cl_bound_cond_wait(@b, @cond, @lock), 0 to check again; once @b has
 * expired, -1 with @lock released and timeout "@msg" (op exec_resize, @msg
 * saying what did not come in time).
 */
int cl_resize_wait(const cl_bound *b, pthread_cond_t *cond, pthread_mutex_t *lock,
                   const char *msg, sbx_error **error);


/**
 * A command run as a shell script on a sandbox whose first member is a
 * cl_sandbox: the exec request's script (cl_shell_script, in the request's
 * cwd, else @workdir), its environment overlay and a dup of its stdin,
 * and a tag, "sbx-exec-" and 24 hex digits, which every process of the
 * command carries as CL_EXEC_MARK (the plugin's worker sets it) so that
 * exec_kill reaches all of them. A plugin's process struct may begin with
 * one and add fields of its own (freed by @fini). The worker (@run, on
 * the cl_proc's thread) does the provider's part. The slots below serve
 * exec_wait, exec_kill and exec_free as they are. Not thread-safe beyond
 * what cl_proc gives (one caller at a time).
 */
typedef struct cl_script_proc {
    cl_proc base;               /* first member (cloud.h) */
    sbx_plugin_sandbox *sb;
    char *script;
    char **env;                 /* "K=V" overlay, copied; never NULL */
    int stdin_fd;               /* a dup of the request's, or -1 */
    char tag[40];
    int oom_killed;             /* the provider said the command's memory ran
                                 * out (CASE-49; the worker sets it) */
    unsigned flags;             /* the request's SBX_PLUGIN_EXEC_* bits (0 when
                                 * it has none) */
    cl_run_fn run_short;        /* the plugin's runner of its own commands */
    void (*fini)(struct cl_script_proc *p);  /* frees the plugin's fields, or NULL */
} cl_script_proc;

/**
 * Allocates @size bytes (at least a cl_script_proc; zeroed) for a command
 * of @rq on @sb and fills in the script, env and tag; stdin is taken by
 * cl_script_proc_launch(). Returns it, or NULL with resource_exhausted
 * (op @op) in *@error.
 */
cl_script_proc *cl_script_proc_new(size_t size, sbx_plugin_sandbox *sb, const char *workdir,
                                   const sbx_plugin_exec_request *rq, cl_run_fn run_short,
                                   const char *op, sbx_error **error);

/** Frees @p before cl_script_proc_launch() (its @fini called). */
void cl_script_proc_free(cl_script_proc *p);

/**
 * Takes @rq's stdin (a dup) and starts @p's worker @run (cl_exec_launch):
 * 0 with *@process set, or -1 with *@error set and @p freed (its @fini
 * called).
 */
int cl_script_proc_launch(cl_script_proc *p, cl_proc_run_fn run,
                          const sbx_plugin_exec_request *rq, const char *op,
                          sbx_plugin_process **process, sbx_error **error);

/**
 * The whole exec_start slot of a provider whose commands are cl_script_procs
 * (op exec): cl_exec_check(@sb's head, @provider, @rq, 0), then
 * cl_script_proc_new() of a plain cl_script_proc (cwd from @workdir when @rq
 * names none, @run_short its runner) and cl_script_proc_launch() with the
 * worker @run. 0 with *@process set, or -1 with *@error set and nothing
 * left running.
 */
int cl_script_exec_start(sbx_plugin_sandbox *sb, const char *provider, const char *workdir,
                         const sbx_plugin_exec_request *rq, cl_run_fn run_short,
                         cl_proc_run_fn run, sbx_plugin_process **process, sbx_error **error);

/** Uploads the @n bytes @data to the absolute @path in @sb, the provider's
 *  way: 0, or -1 with *@error set. */
typedef int (*cl_upload_bytes_fn)(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                                  const char *path, const char *data, size_t n, const char *op,
                                  sbx_error **error);

/**
 * The per-call environment of @p for a provider whose command reads it
 * from a file: when @p has one, its export lines (cl_env_exports())
 * uploaded by @up to /tmp/.TAG.env in @p's sandbox, and ". FILE; rm -f
 * FILE" and a newline appended to @pre (the script's prelude, sourced
 * before the command). 0, also when @p has no env; -1 with the thread's
 * last error (cl_last()): @up's, or resource_exhausted "out of memory"
 * (op @op). On @p's worker thread.
 */
int cl_script_env_prelude(cl_script_proc *p, const sbx_call_ctx *ctx, cl_upload_bytes_fn up,
                          cl_buf *pre, const char *op);

/** The size of a path cl_script_stdin_file() writes: enough for a @dir of
 *  up to 20 bytes. */
#define CL_STDIN_PATH_MAX 64

/**
 * The stdin of @p's command for a provider whose command reads it from a
 * file in the sandbox: when @p has one (its stdin_fd >= 0), what it holds
 * (read to its end) uploaded by @up (named "stdin" in its errors) to
 * @dir/.TAG.in in @p's sandbox and that path written to @path; else
 * "/dev/null" written there. @dir is absolute ("/tmp"), at most 20 bytes;
 * @path holds CL_STDIN_PATH_MAX bytes. 0; -1 with @up's error, the
 * thread's last error (cl_last()), op @op. On @p's worker thread.
 */
int cl_script_stdin_file(cl_script_proc *p, const sbx_call_ctx *ctx, cl_upload_fn up,
                         const char *dir, char path[CL_STDIN_PATH_MAX], const char *op);

/**
 * cl_script_stdin_file() into @dir, and the line that makes it the stdin
 * of the rest of the script appended to @pre (the script's prelude):
 * "exec <PATH; rm -f PATH" for an uploaded file (read once, removed at
 * once), else "exec </dev/null", and a newline. 0; -1 with the thread's
 * last error (cl_last()): @up's, or resource_exhausted "out of memory"
 * (op @op; @pre then holds part of the line: the caller clears it). On
 * @p's worker thread.
 */
int cl_script_stdin_prelude(cl_script_proc *p, const sbx_call_ctx *ctx, cl_upload_fn up,
                            const char *dir, cl_buf *pre, const char *op);

/** The exec_wait slot for a cl_script_proc: cl_exec_wait_script(). */
int cl_script_exec_wait(sbx_plugin_process *process, const sbx_call_ctx *ctx, int timeout_ms,
                        int *exit_code, sbx_error **error);
/** The exec_kill slot for a cl_script_proc: cl_proc_mark_kill() with its
 *  tag, the scan run by its run_short (without the mark). */
int cl_script_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int sig,
                        sbx_error **error);
/** The exec_end_info slot for a cl_script_proc: SBX_PLUGIN_EXEC_OOM_KILLED
 *  when its worker set oom_killed. Read after exec_wait returned 1. */
int cl_script_exec_end_info(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                            uint64_t *flags, sbx_error **error);
/** The exec_free slot for a cl_script_proc (NULL: nothing): the worker
 *  stopped and joined first (so it starts nothing afterwards), then, unless
 *  the worker had ended before (the command's end, or a failure) or the
 *  sandbox is gone, SIGKILL to every process of the command (its
 *  run_short, within 30 s), and everything freed, @fini first. */
void cl_script_exec_free(sbx_plugin_process *process);

/**
 * Defines @name, a static exec_start slot of a provider whose commands are
 * plain cl_script_procs, its sandbox struct starting with a cl_sandbox @s
 * whose workdir is the default cwd, and whose API is JSON: cl_exec_check()
 * of @rq, then cl_text_check(rq, NULL, "JSON", @text_flags, "exec", error)
 * (@text_flags 0, or CL_TEXT_ENV_AS_BYTES when the per-call environment
 * travels as a file's bytes), both before anything is sent, then
 * cl_script_exec_start(sb, @backend, sb->s.workdir, rq, @run_short, @run,
 * process, error). Returns 0 with *process set, or -1 with the first
 * check's error (gone, unsupported request, text the API cannot carry) or
 * cl_script_exec_start()'s. Thread-safe as the runners are.
 */
#define CL_SCRIPT_EXEC_START(name, backend, run_short, run, text_flags)                     \
    static int name(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,                        \
                    const sbx_plugin_exec_request *rq, sbx_plugin_process **process,        \
                    sbx_error **error)                                                      \
    {                                                                                       \
        (void)ctx;                                                                          \
        if (cl_exec_check(&sb->s, (backend), rq, 0, error) < 0                              \
            || cl_text_check(rq, NULL, "JSON", (text_flags), "exec", error) < 0)            \
            return -1;                                                                      \
        return cl_script_exec_start(sb, (backend), sb->s.workdir, rq, (run_short), (run),   \
                                    process, error);                                        \
    }

/**
 * The exec_wait, exec_kill and exec_free members of the descriptor of a
 * provider whose commands are cl_script_procs (cl_script_exec_wait(),
 * cl_script_exec_kill(), cl_script_exec_free()), in its designated
 * initializer after CL_PLUGIN_HEAD().
 */
#define CL_SCRIPT_PROC_SLOTS                                                                \
    .exec_wait = cl_script_exec_wait, .exec_kill = cl_script_exec_kill,                     \
    .exec_free = cl_script_exec_free

/**
 * "@api/@collection/ID@suffix" with @id percent-encoded (@suffix "" for
 * none): the URL of one item of the provider's API. A new string, NULL on
 * no memory.
 */
char *cl_item_url(const char *api, const char *collection, const char *id, const char *suffix);

/**
 * cl_request(@h, @ctx, @rq, @r) at @url, a string the call takes and frees
 * (NULL, from a builder that ran out of memory: resource_exhausted, nothing
 * sent): @rq->url is @url for the call and NULL after it. Returns as
 * cl_request(): 0 with the answer in @r (any status), -1 when none came.
 */
int cl_request_at(cl_http *h, const sbx_call_ctx *ctx, cl_req *rq, char *url, cl_resp *r,
                  const char *op, sbx_error **error);

/**
 * POST @url, a string the call takes and frees (NULL, from a builder that
 * ran out of memory: resource_exhausted, nothing sent), with @body (a JSON
 * object the caller keeps; NULL sends {}) as a safe or unsafe call
 * (@idem). Returns as cl_request(): 0 with the answer in @r (any status),
 * -1 when none came.
 */
int cl_post_json(cl_http *h, const sbx_call_ctx *ctx, char *url, struct json_object *body,
                 cl_idempotency idem, cl_resp *r, const char *op, const char *what,
                 sbx_error **error);

/**
 * cl_request_json() on cl_item_url(@api, @collection, @id, @suffix): a call
 * on one item (@body NULL: none). Returns as cl_request(); a URL that
 * cannot be made is resource_exhausted.
 */
int cl_item_request(cl_http *h, const sbx_call_ctx *ctx, const char *method, const char *api,
                    const char *collection, const char *id, const char *suffix,
                    struct json_object *body, cl_idempotency idem, cl_resp *r, const char *op,
                    const char *what, sbx_error **error);

/**
 * GET @url (a safe call, retried): the JSON of a 200 answer (a new object,
 * json_object_put()), else NULL with *@status the answer's status (0 when
 * none came) and, unless it is 404 (the item does not exist: no error), the
 * error of the call or of the answer (@what names the call). A NULL @url
 * (no memory building it) is resource_exhausted.
 */
struct json_object *cl_get_json(cl_http *h, const sbx_call_ctx *ctx, const char *url,
                                long *status, const char *op, const char *what,
                                sbx_error **error);

/**
 * DELETE @url (a safe call, retried): 0 on a 2xx answer or 404 (gone
 * already), else -1 with the error of the call or of the answer (@what
 * names the call). A NULL @url is resource_exhausted.
 */
int cl_delete_url(cl_http *h, const sbx_call_ctx *ctx, const char *url, const char *op,
                  const char *what, sbx_error **error);

/** cl_get_json() on cl_item_url(@api, @collection, @id, ""): the item's
 *  JSON, or NULL as cl_get_json() gives it (*@status 404: it does not
 *  exist, no error). */
struct json_object *cl_item_get(cl_http *h, const sbx_call_ctx *ctx, const char *api,
                                const char *collection, const char *id, long *status,
                                const char *op, const char *what, sbx_error **error);

/** cl_delete_url() on cl_item_url(@api, @collection, @id, ""): 0 also when
 *  the item is gone already. */
int cl_item_delete(cl_http *h, const sbx_call_ctx *ctx, const char *api, const char *collection,
                   const char *id, const char *op, const char *what, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* multipart/form-data bodies (runloop's, blaxel's and daytona's uploads),   */
/* and a body streamed from a descriptor                                     */
/* ------------------------------------------------------------------------ */

/**
 * The frame of a multipart/form-data body (RFC 7578) around one file's
 * bytes: what goes before them (@head: the text fields, then the file
 * field's headers), what goes after them (@tail: the closing boundary)
 * and the Content-Type header's value (@ctype: "multipart/form-data;
 * boundary=..."). The boundary is "sbx-form-" and 24 random hex digits.
 * Made by cl_form_begin(), freed by cl_form_clear(). One per body; not
 * thread-safe.
 */
typedef struct cl_form {
    cl_buf head;        /* NUL-terminated; head.len bytes */
    char tail[48];      /* NUL-terminated; tail_len bytes */
    size_t tail_len;
    char ctype[80];     /* NUL-terminated */
} cl_form;

/**
 * Makes @f (its previous content not read: the caller starts from a
 * zeroed or cleared one) for the text fields @fields ("name", "value",
 * ... pairs, NULL-terminated; NULL for none), in their order, then the
 * file field @file_field with filename @filename and type
 * application/octet-stream. 0, or -1 on no memory (@f then cleared; no
 * error stored: the caller names the call). Thread-safe.
 */
int cl_form_begin(cl_form *f, const char *const *fields, const char *file_field,
                  const char *filename);

/** Frees what cl_form_begin() made in @f (it can be made again). */
void cl_form_clear(cl_form *f);

/**
 * A request body streamed from a descriptor between a fixed head and tail
 * (a cl_form's frame around a file's bytes): its cl_source_fn is
 * cl_fd_body_read(), its source_len -1 (chunked). With a spool (an unlinked
 * host file, tmpfile(3)), every byte read from the descriptor is also kept
 * there, so that the body can be sent again from its start
 * (cl_fd_body_rewind()) after the provider answered before it read the
 * body. Made by cl_fd_body_init(), freed by cl_fd_body_clear(). One
 * request at a time; not thread-safe.
 */
typedef struct cl_fd_body {
    const char *head, *tail;    /* borrowed: they outlive the body */
    size_t head_len, tail_len, head_off, tail_off;
    int fd;                     /* borrowed; read to its end */
    int at_eof;
    FILE *spool;                /* the unlinked host file, or NULL */
    int spool_ok;               /* the spool holds every byte read so far */
    int replaying;              /* reading the spool back before @fd */
    const char *what;           /* what the bytes are ("stdin"), for the
                                 * warnings and errors */
    const char *op;             /* the call's op, for the errors */
} cl_fd_body;

/**
 * Makes @m: @head (@head_len bytes), then what @fd holds to its end, then
 * @tail (@tail_len bytes); with @spool non-zero a spool file is made, and
 * when it cannot be, a warning is logged ("cannot make a spool file for
 * @what (...): it cannot be sent again") and the body has none. @what and
 * @op are borrowed (string constants). Thread-safe.
 */
void cl_fd_body_init(cl_fd_body *m, const char *head, size_t head_len, const char *tail,
                     size_t tail_len, int fd, int spool, const char *what, const char *op);

/**
 * The cl_source_fn of a cl_fd_body @ud: the next bytes of the body, 0 at
 * its end, -1 when @fd cannot be read (cl_fd_source()'s error) or the
 * spool cannot be read back (execution_failed "cannot read back the
 * spooled @what: ...", op @op, as the thread's last error). A spool that
 * cannot be written is given up with a warning ("cannot spool @what
 * (...): it cannot be sent again"): the body goes on without it.
 */
ssize_t cl_fd_body_read(void *ud, char *buf, size_t cap);

/**
 * Puts the cl_fd_body @ud back at its start, the bytes read so far to come
 * from its spool: 0, or -1 when it has no whole spool (none was made, or
 * writing it failed), nothing changed.
 */
int cl_fd_body_rewind(void *ud);

/** Closes @m's spool (the descriptor is the caller's). */
void cl_fd_body_clear(cl_fd_body *m);

/**
 * Builds in @out (appended to; the caller clears it) a multipart/form-data
 * body (RFC 7578): the text fields @fields ("name", "value", ... pairs,
 * NULL-terminated; NULL for none), then the file field @file_field, with
 * filename @filename and type application/octet-stream, holding what @fd
 * holds to its end (read here, retrying on EINTR; the body is in memory).
 * The boundary is "sbx-form-" and 24 random hex digits; the Content-Type
 * header's value ("multipart/form-data; boundary=...") goes to @ctype,
 * @ctype_cap bytes (at least 64). 0, or -1 with invalid_argument "cannot
 * read the data for @shown: ..." (context path=@shown) or
 * resource_exhausted. Thread-safe.
 */
int cl_multipart_body(cl_buf *out, char *ctype, size_t ctype_cap, const char *const *fields,
                      const char *file_field, const char *filename, int fd, const char *shown,
                      const char *op, sbx_error **error);


/* ------------------------------------------------------------------------ */
/* A command's output reported as text (tensorlake's run stream, runloop's   */
/* execution)                                                                */
/* ------------------------------------------------------------------------ */

#define CL_REPORT_SHELL_MAX 8192    /* output bytes the shell itself may encode */
#define CL_REPORT_SHELL_ODD 16      /* NULs and distinct other bytes it encodes, at most */

/**
 * Appends to @b (a cl_buf of the caller's) the definition of the bash
 * function "e FILE", for a wrapper whose provider carries output only as
 * text: it sets f to FILE's field, "p" and the bytes percent-encoded (every
 * byte outside 0x20..0x7e, and "%", as %XX) when FILE holds at most
 * CL_REPORT_SHELL_MAX bytes with at most CL_REPORT_SHELL_ODD NULs and
 * distinct other bytes to encode (the shell reads and encodes them itself,
 * one substitution per distinct byte; an empty file is not read: no
 * program started); else "b" and base64 when it holds at most @b64_max
 * bytes (stat and base64 started); else "-" (the file is to be read as
 * bytes). FILE goes on the list k (space-separated: the files reported) in
 * the first two cases, on m (the files left) in the last. Wants LC_ALL=C
 * set by its caller. 0, or -1 (out of memory). Thread-safe.
 */
int cl_buf_report_encoder(cl_buf *b, int b64_max);

/**
 * Decodes the field @f (@n bytes, not NUL-terminated) of cl_buf_report_encoder()
 * into @out (appended to; the caller clears it): 0; 1 for "-" (the bytes
 * are in the file, nothing appended); -1 when it is none of the three forms
 * (a "p" field with a byte outside 0x20..0x7e or a cut %XX, bad base64),
 * nothing failed (the caller names the call). Thread-safe.
 */
int cl_report_field_decode(const char *f, size_t n, cl_buf *out);

/**
 * A wrapper's report in @rep (@len bytes): @mark (e.g. "SBX-OUT-TAG "), the
 * command's status (0..255) and a newline, then stdout's and stderr's
 * fields of cl_buf_report_encoder(), each ended by a newline, and nothing
 * after. 1 with the bytes appended to @out and @err (the caller clears
 * them) and the status in *@code; 0 when @rep does not start with @mark
 * (no report: the output is in the files); -1 when it does and is cut or
 * malformed ("-" fields included: a report names no file). Nothing
 * failed: the caller names the call. Thread-safe.
 */
int cl_report_parse(const char *rep, size_t len, const char *mark, cl_buf *out, cl_buf *err,
                    int *code);

#endif
