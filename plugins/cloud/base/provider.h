/*
 * provider.h — what the hosted-provider plugins write alike, over cloud.h
 * (provider.c, in the same static base library):
 *
 *   - the "gone" flag of a sandbox the provider no longer has, and its
 *     not_found error with reason "gone" (CASE-32);
 *   - the wait until a sandbox (or a snapshot) reaches a state, polled with
 *     a growing pause and bounded by the call's deadline;
 *   - the session state's shape: a versioned JSON object holding no secret,
 *     written into host memory and read back with its version checked;
 *   - the missing-cwd check after a script of cl_shell_script() exited
 *     CL_CWD_MISSING_EXIT (CASE-18, CASE-46);
 *   - a descriptor as the sink or the source of a request body;
 *   - the marker every process of one command carries in its environment,
 *     and the in-sandbox command that signals them all (setsid'd and
 *     orphaned descendants included, which a process-group kill misses);
 *   - the create's environment as a file in the sandbox that each command
 *     sources, so that it holds after a resume in another process while the
 *     session state holds no env value (per-call values still win).
 *
 * Prefix, threading, errors and ownership as in cloud.h.
 */
#ifndef SBX_CLOUD_PROVIDER_H
#define SBX_CLOUD_PROVIDER_H

#include "cloud.h"

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
 * -1 with cl_gone_error() in *@error when @g is set, else 0.
 */
int cl_gone_check(cl_gone *g, const char *op, const char *provider, const char *id,
                  sbx_error **error);

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

/**
 * Parses @state_json: a new JSON object (free with json_object_put) whose
 * "version" is @version and whose @id_key is a non-empty string, stored in
 * *@id (borrowed from the object). NULL with invalid_argument "@provider
 * session state: needs \"version\": @version and a \"@id_key\"" otherwise.
 */
struct json_object *cl_state_in(const char *state_json, int version, const char *id_key,
                                const char *provider, const char *op, const char **id,
                                sbx_error **error);

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
 * cl_script_cwd() gives it) does not exist: not_found, "the working
 * directory @quoted_cwd does not exist in the sandbox", context path. The
 * caller has checked (e.g. with "test -d") that the directory is missing,
 * since the command itself may exit CL_CWD_MISSING_EXIT.
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

#endif
