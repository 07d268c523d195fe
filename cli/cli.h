/*
 * The shared layer of the sbx command-line tool.
 *
 * sbx is one file per command (cli/run.c, cli/exec.c, cli/cp.c, ...) over
 * this layer; cli/sbx.c only dispatches through the command table. A new
 * command is a file defining a cli_command and one row in that table.
 *
 *   common.c    messages, usage errors, option parsing, numbers
 *   calls.c     stop signals and the library calls they interrupt
 *   output.c    the command's streamed output; names escaped for tables
 *               and JSON
 *   state.c     the state store of `sbx create` and id resolution
 *   sandbox.c   the creation options of run and create; the one-shot
 *               sandbox of run and exec-code
 *
 * Conventions, the same in every file:
 * - The tool's own messages go to stderr as "sbx: MESSAGE"; a function
 *   documented as "reported" has printed its failure so, and the caller
 *   prints nothing more about it.
 * - Exit statuses: CLI_EXIT_TOOL (125) for the tool's own failures, the
 *   command's own status otherwise, 128+N after stop signal N.
 * - A parse step returns CLI_GO_ON (-1) to go on, else the exit status to
 *   leave with (0 after --help).
 * - Strings returned as "new" are the caller's to free(); "borrowed" ones
 *   live as long as what they were taken from.
 * - Threads: sbx runs its commands on the main thread; only the exec of
 *   run and exec-code runs on a worker (sandbox.c), which touches nothing
 *   of this layer but the output sink. Nothing here is thread-safe
 *   otherwise.
 */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include <getopt.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <json-c/json.h>

#include <sbx/sbx.h>

/* Exit status of the tool's own failures (bad usage, create failed, ...),
 * as `docker run`'s. */
#define CLI_EXIT_TOOL 125
/* What a parse step returns to let the command go on. */
#define CLI_GO_ON (-1)
/* How long to wait for a running exec or creation to return once a stop
 * signal ended it (its sandbox destroyed, the creation cancelled). */
#define CLI_SIGNAL_DRAIN_SECS 10
/* How long a cancelled call may take to return before sbx leaves it. */
#define CLI_CANCEL_GRACE_SECS 0.6

/* ------------------------------------------------------------ commands */

/* One command of sbx. */
typedef struct cli_command {
    const char *name;       /* "run": what the user types after "sbx" */
    const char *synopsis;   /* "run [OPTION]... [--] COMMAND [ARG]...", for `sbx --help` */
    const char *summary;    /* what it does, for `sbx --help`; lines split by '\n' */
    /* Runs the command: @argv[0] is its name, the rest its arguments
     * (getopt state is fresh). Returns the exit status. */
    int (*main)(int argc, char **argv);
    /* Prints the command's help to @out. */
    void (*usage)(FILE *out);
} cli_command;

/* The commands, each defined in its own file. */
extern const cli_command cli_command_run, cli_command_exec_code, cli_command_backends,
    cli_command_create, cli_command_exec, cli_command_cp, cli_command_ls, cli_command_rm,
    cli_command_ps, cli_command_gc, cli_command_presets, cli_command_inspect,
    cli_command_version, cli_command_stop, cli_command_start, cli_command_pricing,
    cli_command_agent, cli_command_find_cheapest, cli_command_ledger, cli_command_costs,
    cli_command_port, cli_command_persist, cli_command_hydrate;

/* ---------------------------------------------------- messages (common.c) */

/* Prints "sbx: MESSAGE" (formatted) to stderr. */
void cli_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints @error as "sbx: MESSAGE [code=CODE, ...]" to stderr and frees it
 * (NULL: "unknown error"). */
void cli_error(sbx_error *error);

/* Reports "out of memory"; returns CLI_EXIT_TOOL. */
int cli_out_of_memory(void);

/* Reports bad usage of command @cmd (NULL for sbx itself) and where its
 * help is; returns CLI_EXIT_TOOL. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Flushes stdout; reports "cannot write @what" and returns CLI_EXIT_TOOL
 * when that fails, else returns 0. */
int cli_flush(const char *what);

/* The backend when -b is not given: $SBX_BACKEND, else "local" (borrowed). */
const char *cli_default_backend(void);

/*
 * A control plane (sbx-server) mode: `sbx --remote URL COMMAND` sets
 * BESPOKE_SANDBOX_URL, and with it set (by --remote or by the caller) the
 * sandboxes of run, create and exec-code are made on the "remote" backend,
 * the backend chosen with -b (or $SBX_BACKEND, else local) being the one the
 * control plane runs them on (BESPOKE_SANDBOX_BACKEND); -b remote is the
 * remote backend itself. The product key is $BESPOKE_SANDBOX_KEY.
 * cli_remote_backend maps @backend so (returning "remote" and setting the
 * variable) when the mode is on, else returns it unchanged. Borrowed.
 */
const char *cli_remote_backend(const char *backend);

/* Removes @path and everything below it, not following symbolic links;
 * best effort (what cannot be removed stays, silently). */
void cli_remove_tree(const char *path);

/* ------------------------------------------------ option parsing (common.c) */

/*
 * Handles the value @arg of an option (NULL for one without a value) for
 * command @cmd; @ctx is what cli_parse_options was given. Returns
 * CLI_GO_ON, or the exit status after reporting.
 */
typedef int (*cli_option_fn)(const cli_command *cmd, const char *arg, void *ctx);

/* One option of a command. A table of them ends with a row whose name and
 * letter are both 0. */
typedef struct cli_option {
    const char *name;       /* long name without "--"; NULL: a letter only */
    int letter;             /* short letter; 0: a long name only */
    int takes_value;        /* 1: "--name=VALUE", "--name VALUE", "-xVALUE", "-x VALUE" */
    int *flag;              /* not NULL: set to 1 when the option is given */
    cli_option_fn handle;   /* not NULL: called with the value */
} cli_option;

/*
 * Parses the options of @cmd in @argv up to the first operand (getopt's
 * "+" mode; optind then points at it), calling each option's handler in
 * the order given. -h and --help print the command's help to stdout;
 * anything else not in @options (at most CLI_MAX_OPTIONS rows) is a usage
 * error naming it. Returns CLI_GO_ON, 0 after the help, or the exit status
 * of the first failure (reported).
 */
#define CLI_MAX_OPTIONS 32
int cli_parse_options(const cli_command *cmd, int argc, char **argv,
                      const cli_option *options, void *ctx);

/* CLI_GO_ON when no operand is left at optind, else a usage error naming
 * the first one. */
int cli_no_operands(const cli_command *cmd, int argc, char **argv);

/* cli_parse_options for a command that takes no operand: one is a usage
 * error (cli_no_operands). */
int cli_parse_options_only(const cli_command *cmd, int argc, char **argv,
                           const cli_option *options, void *ctx);

/*
 * Parses @arg, the value of option @option ("-t", "--cpu") of @cmd, as a
 * finite number > 0 (fractions allowed: what sbx_options_set_timeout_secs
 * and sbx_options_set_cpu accept) into *@out. Returns CLI_GO_ON, or a
 * usage error naming the value, its @unit ("seconds") and the range:
 *   invalid -t value "0": expected seconds, a finite number greater than 0
 *   (fractions allowed)
 */
int cli_parse_positive(const cli_command *cmd, const char *option, const char *arg,
                       const char *unit, double *out);

/* cli_parse_positive, the error ending with "; " and @otherwise (what
 * else is allowed; NULL: nothing). */
int cli_parse_positive_or(const cli_command *cmd, const char *option, const char *arg,
                          const char *unit, const char *otherwise, double *out);

/* The same for a whole number from 1 to INT64_MAX (MiB). */
int cli_parse_positive_int64(const cli_command *cmd, const char *option, const char *arg,
                             const char *unit, int64_t *out);

/* CLI_GO_ON when @arg, the value of -e, is KEY=VALUE with a non-empty
 * KEY, else a usage error naming it. */
int cli_check_env(const cli_command *cmd, const char *arg);

/* The variable -e @arg gives, as docker reads it: KEY=VALUE as it is;
 * KEY alone is KEY with sbx's own value of it (*@kv a string that lives
 * until sbx exits), or nothing (*@kv NULL) when sbx has no KEY. An empty
 * @arg or KEY is a usage error naming it. Returns CLI_GO_ON or an exit
 * status (reported). */
int cli_env_arg(const cli_command *cmd, const char *arg, const char **kv);

/* ---------------------------------------- signals and calls (calls.c) */

/*
 * Every command ends on SIGINT, SIGTERM and SIGHUP. The handlers (set once,
 * by cli_signals_install) only record the signal and wake the main thread
 * through a pipe. A library call that may block (exec, file transfers,
 * listings, create, destroy) runs through cli_call_run as an operation of
 * a one-worker sbx_async pool while the main thread waits for it or for a
 * stop signal.
 */

/* The first stop signal received, 0 while none was. */
extern volatile sig_atomic_t cli_signal;

/* Installs the stop signal handlers (a signal ignored by whoever started
 * sbx stays ignored) and makes SIGPIPE an error return. */
void cli_signals_install(void);

/* The read end of the pipe the handlers write to (non-blocking), -1 when
 * it could not be made (waiters poll then). */
int cli_signal_fd(void);

/* Reads what is in @fd until it would block. */
void cli_drain_fd(int fd);

/* "SIGINT", "SIGTERM", "SIGHUP" or "a signal" (static). */
const char *cli_signal_name(int signo);

/* What a finished call handed over (each NULL / 0 when not its kind). */
typedef struct cli_outcome {
    int done;
    sbx_error *error;
    sbx_result *result;       /* exec */
    sbx_file_info **list;     /* list */
    size_t count;
    int64_t value;            /* transfers: bytes or entries */
    sbx_sandbox *sandbox;     /* create */
} cli_outcome;

/* Frees what @o holds (a sandbox it holds is destroyed first) and zeroes it. */
void cli_outcome_clear(cli_outcome *o);

/* Reports @o's error (taken from it), clears @o; returns CLI_EXIT_TOOL. */
int cli_outcome_fail(cli_outcome *o);

typedef enum cli_call_kind {
    CLI_CALL_EXEC,            /* request on sandbox */
    CLI_CALL_LIST,            /* sandbox_path of sandbox */
    CLI_CALL_UPLOAD_FILE,     /* local_path to sandbox_path */
    CLI_CALL_UPLOAD_DIR,
    CLI_CALL_DOWNLOAD_FILE,   /* sandbox_path to local_path */
    CLI_CALL_DOWNLOAD_DIR,
    CLI_CALL_CREATE,          /* backend, options */
    CLI_CALL_DESTROY          /* sandbox */
} cli_call_kind;

/* One library call made interruptibly. Every pointer is borrowed for the
 * call's length. */
typedef struct cli_call {
    cli_call_kind kind;
    const char *what;                  /* "the copy": for messages */
    sbx_sandbox *sandbox;
    const char *sandbox_path;
    const char *local_path;
    const sbx_exec_request *request;
    const char *backend;
    const sbx_options *options;
    double grace;                      /* seconds; 0: CLI_CANCEL_GRACE_SECS */
    /* Run when the cancelled call did not return within the grace, just
     * before sbx exits without it: removes what it may have left on this
     * host. May be NULL. */
    void (*cleanup)(void *cleanup_arg);
    void *cleanup_arg;
} cli_call;

/*
 * Makes @call and waits for it or a stop signal. Returns 0 when the call
 * finished first (its outcome in *@out, the caller's to clear; a failure
 * is in out->error, not reported); 128+N when stop signal N came first
 * (reported; the call was cancelled and returned within the grace, its
 * outcome dropped; but a destroy that succeeded all the same returns 0:
 * the sandbox is gone); CLI_EXIT_TOOL when it could not be started
 * (reported). When the cancelled call does not return within the grace,
 * the cleanup runs and sbx exits 128+N without waiting for it.
 */
int cli_call_run(const cli_call *call, cli_outcome *out);

/* ------------------------------------------------------- output (output.c) */

/*
 * The command's chunks are written to sbx's stdout / stderr as they
 * arrive. A stream whose reader went away is dropped from then on (the
 * command keeps running; its exit code still decides ours).
 */
typedef struct cli_sink {
    int broken[3];
} cli_sink;

/* An sbx_output_fn writing to the cli_sink @user_data (zeroed first). */
void cli_sink_output(sbx_stream stream, const void *data, size_t len, void *user_data);

/* The exit status for the finished exec @result (taken and freed; NULL:
 * @error is reported and CLI_EXIT_TOOL returned), saying so on stderr
 * when it timed out. */
int cli_exec_status(sbx_result *result, sbx_error *error);

/*
 * Names that come from a sandbox (file names, record fields) are bytes the
 * sandbox chose. Table output escapes them so they cannot drive the
 * terminal or fake extra lines; JSON output keeps the document valid UTF-8
 * and the exact bytes recoverable.
 */

/*
 * @s for a table (new string; NULL when memory runs out): a backslash
 * becomes "\\", newline, carriage return and tab "\n", "\r", "\t", every
 * other control character (C0, DEL and the C1 controls U+0080-U+009F) and
 * every byte that is not part of valid UTF-8 "\xHH" for each of its bytes;
 * the rest (printable ASCII, valid UTF-8) is kept as is.
 */
char *cli_escape_name(const char *s);

/* Prints @s escaped (cli_escape_name) to stdout. */
void cli_print_escaped(const char *s);

/*
 * Adds @key: @s to JSON object @o so that the document stays valid UTF-8:
 * @s itself when it is valid UTF-8 (JSON escapes its control characters);
 * else @s with each byte that is not part of valid UTF-8 replaced by
 * U+FFFD, plus KEY_base64: the exact bytes in base64.
 */
void cli_json_add_name(json_object *o, const char *key, const char *s);

/* Adds @key: @s, or null when @s is NULL, to JSON object @o. */
void cli_json_add_string(json_object *o, const char *key, const char *s);

/*
 * Prints @doc, pretty, and a newline to stdout, then releases @doc. DEL and
 * the C1 controls, which a terminal may act on, are written as \u007f and
 * \u0080-\u009f (json-c escapes the C0 controls itself).
 */
void cli_print_json(json_object *doc);

/* ------------------------------------------------ state store (state.c) */

/* 1 when @id can name a state file (and a `cp` operand): [A-Za-z0-9_.-],
 * starting with a letter or digit, at most 200 bytes. */
int cli_id_valid(const char *id);

/*
 * The directory holding the state files (new string in *@dir), checked
 * (see state.c). With @create, what is missing is made 0700. Returns 1; 0
 * when the directory does not exist and !@create (nothing recorded); -1
 * (reported, a configuration error naming the path, its owner and mode).
 */
int cli_state_dir_open(int create, char **dir);

/* The current time as ISO 8601 UTC ("2025-01-02T03:04:05Z"). */
void cli_iso8601_now(char out[32]);

/*
 * Records the session state @state (JSON text) of sandbox @id, created at
 * @created (ISO 8601), with the members of the JSON object @meta (borrowed,
 * may be NULL: "name", "expires", "options", see cli_record): written
 * atomically, never replacing the record of another sandbox with the same
 * id. Returns 0 or -1 (reported).
 */
int cli_state_store(const char *id, const char *created, const char *state,
                    json_object *meta);

/* A recorded sandbox; every string is owned by the record. */
typedef struct cli_record {
    char *id;
    char *created;     /* ISO 8601 UTC */
    char *backend;
    char *state;       /* the session state, JSON text */
    char *name;        /* --name of create; NULL when none */
    char *expires;     /* ISO 8601 UTC end of the lifetime; NULL when unknown */
    char *options;     /* the creation options that were set, a JSON object
                        * (text); NULL when not recorded */
    int stopped;       /* 1 after `sbx stop`, until `sbx start` */
} cli_record;

/* Rewrites the record @rec (as loaded) with "stopped" set (@stopped 1) or
 * removed (0), atomically. Returns 0 or -1 (reported). */
int cli_state_set_stopped(const cli_record *rec, int stopped);

/* Frees the strings of @r and zeroes it. */
void cli_record_clear(cli_record *r);

/* Reads the record of @id into *@rec. Returns 0; 1 when there is none
 * (nothing reported); -1 when it cannot be read or is malformed
 * (reported, naming the file). */
int cli_state_load(const char *id, cli_record *rec);

/*
 * Reads every record into a new array *@records of *@count, oldest first
 * (then by id); free it with cli_state_list_free. Stops early on a stop
 * signal. Returns 0 (also when nothing is recorded); 1 when memory ran out
 * midway or a record was malformed or refused (reported and left out; what
 * was read is listed); -1 when the state directory cannot be read
 * (reported; nothing listed).
 */
int cli_state_list(cli_record **records, size_t *count);

/* Frees what cli_state_list returned. */
void cli_state_list_free(cli_record *records, size_t count);

/* Removes the record of @id. Returns 0 or -1 (reported). */
int cli_state_forget(const char *id);

/*
 * Reattaches to the recorded sandbox @ref, an id, a name or a unique id
 * prefix (cli_resolve_record; the caller frees the sandbox). Returns it,
 * or NULL after reporting why: what cli_resolve_record reports when @ref
 * names no single record, the library's error otherwise (stored in
 * *@gone_error instead of reported when it is not_found and @gone_error is
 * not NULL).
 */
sbx_sandbox *cli_sandbox_open(const char *ref, sbx_error **gone_error);

/*
 * Resolves @ref as docker resolves a container reference: the record whose
 * id is @ref, else the one whose --name is @ref, else the only one whose id
 * starts with @ref. Returns 0 with the record in *@rec (clear it with
 * cli_record_clear); 1 when nothing matches (reported: "no such sandbox:
 * REF"); 2 when several ids start with @ref (reported: "sandbox id prefix
 * "REF" is ambiguous: it matches ID1, ID2"); -1 when the state cannot be
 * read (reported).
 */
int cli_resolve_record(const char *ref, cli_record *rec);

/* cli_resolve_record keeping only the id (new string in *@id, NULL on
 * failure). */
int cli_resolve_id(const char *ref, char **id);

/* 0 when @name can name a new sandbox (the shape of cli_id_valid, and
 * neither the name nor the id of a recorded one), else -1 after reporting
 * why, naming it: "the name "web" is already taken by sandbox ID". */
int cli_name_check(const char *name);

/* Whether the recorded sandbox @rec still exists (resumed and asked):
 * 1, 0 (also when its backend says not_found), or -1 when that cannot be
 * told (reported). In ps.c. */
int cli_record_alive(const cli_record *rec);

/* The state ps and inspect show for @rec (static string): "running" when
 * @alive (cli_record_alive) is 1, "unknown" when -1; when 0, "expired"
 * if the recorded expiry is not after @now (ISO 8601 UTC, compared as
 * text), else "stopped" after `sbx stop`, else "gone". In ps.c. */
const char *cli_record_state(const cli_record *rec, int alive, const char *now);

/* Length of an id in tables without --no-trunc (docker's 12). */
#define CLI_SHORT_ID_LEN 12

/* The id to show in a table: a hexadecimal id longer than
 * CLI_SHORT_ID_LEN (docker's 64 digits) cut to its first CLI_SHORT_ID_LEN
 * digits, written to @buf; any other id (local's "sbx-local-XXXXXX") is
 * @id itself, whole. */
const char *cli_short_id(const char *id, char buf[CLI_SHORT_ID_LEN + 1]);

/* ------------------------------------------------- cp with "-" (cp_tar.c) */

/*
 * `sbx cp ID:SRC -`: copies sandbox path @src_path (a directory when
 * @is_dir) of @sandbox to a private staging directory on this host and
 * writes it to stdout as one tar stream (POSIX pax) whose entries are
 * named from SRC's last component ("dir/", "dir/file"), as docker cp does.
 * The staging directory is removed in every case. Returns 0 or the exit
 * status (reported).
 */
int cli_cp_tar_out(sbx_sandbox *sandbox, const char *src_path, int is_dir);

/*
 * `sbx cp - ID:DST`: extracts the tar stream on stdin (plain or
 * compressed) into a private staging directory, refusing an entry with an
 * absolute name or a ".." component (naming it), and copies what it holds
 * into sandbox directory @dst_path (merged). The staging directory is
 * removed in every case. Returns 0 or the exit status (reported).
 */
int cli_cp_tar_in(sbx_sandbox *sandbox, const char *dst_path);

/* ------------------------------------------- making sandboxes (sandbox.c) */

/* Help lines of the creation options that run and create share. */
#define CLI_CREATION_OPTIONS_HELP \
"  -p, --publish=PORT      expose the sandbox's TCP port PORT to this host\n" \
"                          (repeatable; `sbx port ID` shows where it is)\n" \
"      --cpu=N             vCPUs (fractions allowed)\n" \
"      --memory=MIB        memory in MiB\n" \
"      --git-repo=URL      clone URL (a local path works) into the sandbox's\n" \
"                          working directory, under its last path component\n" \
"      --git-ref=REF       branch or tag to clone (with --git-repo)\n" \
"      --image=IMAGE       image to start from (backends that take one)\n" \
"      --preset=NAME       preset whose values are the defaults of every\n" \
"                          option not given (see `sbx presets`)\n" \
"      --no-internet       no network but the sandbox's own loopback\n" \
"      --opt=KEY=VALUE     backend option (repeatable; VALUE is read as JSON\n" \
"                          when it is valid JSON, else as a string)\n" \
"      --file=LOCAL:PATH   copy host file LOCAL to sandbox path PATH at\n" \
"                          create, keeping its mode (repeatable; PATH is\n" \
"                          what follows the last ':')\n" \
"  -v, --verbose           show the output of the preset's setup commands\n" \
"                          (each step's start and duration are always shown);\n" \
"                          not docker's -v: no host directory is mounted\n" \
"  -h, --help              show this help and exit\n"


/* run's -u (sandbox.c): the user its command runs as, NULL for the
 * sandbox's default; borrowed from argv. */
extern const char *cli_run_user;

/* ------------------------------------ interactive commands (tty.c) */

/* -i and -t of run and exec, as docker's. */
typedef struct cli_terminal {
    int interactive;          /* -i: stdin stays open, sbx's stdin is piped to it */
    int tty;                  /* -t: the command runs on a terminal */
} cli_terminal;

/*
 * Before option parsing: "-t5" (the old -t SECONDS, written together) and
 * "-iIMAGE" before the first operand are usage errors naming the new
 * option: "--timeout 5" (@what: "lifetime" for run, "timeout" for exec),
 * "--image IMAGE" (run only). @what NULL: nothing to check. Returns
 * CLI_GO_ON or CLI_EXIT_TOOL (reported).
 */
int cli_check_old_letters(const cli_command *cmd, int argc, char **argv, const char *what);

/* A cli_option_fn for the letter -t with a value where it was the lifetime
 * (create, exec-code): a usage error naming --timeout VALUE. */
int cli_old_timeout_letter(const cli_command *cmd, const char *arg, void *ctx);

/*
 * After option parsing, with optind at the first operand: the old
 * meanings of -t and -i that now parse as flags are usage errors naming
 * the new option: -t given and the first operand a number ("sbx run -t 5
 * -- echo": "the lifetime is now --timeout 5"; @what as above), and for
 * run (@image_hint) -i given and a word left before "--" ("sbx run -i
 * debian -- sh": "the image is now --image debian"). Then, with -t, stdin
 * must be a terminal ("the input device is not a TTY"). Returns CLI_GO_ON
 * or CLI_EXIT_TOOL (reported).
 */
int cli_check_terminal_args(const cli_command *cmd, const cli_terminal *term, int argc,
                            char **argv, const char *what, int image_hint);

/*
 * Runs @request (argv/shell, env, cwd, timeout set) in @sandbox as @term
 * says: with -i sbx's stdin goes to the command until its EOF (then the
 * command's stdin closes); with -t on a terminal of sbx's terminal's size,
 * followed on SIGWINCH, and with -i -t sbx's terminal in raw mode (every
 * key, ^C and ^D included, goes to the command as bytes), restored on
 * every way out. Output goes to stdout / stderr as it comes. A stop
 * signal ends the command's processes (SIGTERM, then SIGKILL) and returns
 * 128+N. Returns the exit status for the tool (cli_exec_status).
 */
int cli_terminal_exec(sbx_sandbox *sandbox, sbx_exec_request *request, const cli_terminal *term);

/* The context of the creation option handlers; a command's own context may
 * start with one to use them (exec-code does). */
typedef struct cli_creation {
    sbx_options *options;
    const char **backend;     /* -b: set to the value, borrowed from argv */
} cli_creation;

/* -b: a cli_option_fn whose @ctx is a cli_creation. */
int cli_set_backend(const cli_command *cmd, const char *arg, void *ctx);

/* --timeout SECONDS: the lifetime and default command timeout (a finite number
 * > 0); a cli_option_fn whose @ctx is a cli_creation. For run and create
 * an invalid value's error also says how to have no lifetime (run's
 * --no-lifetime) or why there is none (create's sandboxes are detached). */
int cli_set_timeout(const cli_command *cmd, const char *arg, void *ctx);

/* 1 after run's --no-lifetime: its one-shot sandbox gets no lifetime
 * (SBX_TIMEOUT_NONE) and its command no timeout unless --timeout gives
 * one. create refuses the option (its sandboxes are detached). */
extern int cli_creation_no_lifetime;

/*
 * Parses the creation options of run and create (-b -e -w --timeout --cpu
 * --memory --git-repo --git-ref --image --preset --no-internet --opt --file
 * -h; with @term, run's -i and -t into it; without, create's -t VALUE and
 * -i VALUE are errors naming --timeout and --image)
 * from @argv into @options and *@backend (borrowed from @argv); stops at
 * the first operand (optind points at it). Returns CLI_GO_ON, or the exit
 * status to leave with (0 after --help, 125 after an error, reported).
 */
int cli_parse_creation_options(const cli_command *cmd, int argc, char **argv,
                               sbx_options *options, const char **backend, cli_terminal *term);

/* cli_parse_creation_options (without run's -i and -t) with the rows of
 * @extra (at most 7, ended by a zero row) added: the command's own options.
 * Their handlers get the creation context as @ctx: they keep what they
 * parse in the command's own state. */
int cli_parse_creation_options_extra(const cli_command *cmd, int argc, char **argv,
                                     sbx_options *options, const char **backend,
                                     const cli_option *extra);

/* The value of --name (borrowed from argv), set by
 * cli_parse_creation_options for create (run refuses it); NULL when not
 * given. */
extern const char *cli_creation_name;

/* A new sbx_options, or NULL after reporting. */
sbx_options *cli_options_new(void);

/* Destroys @sandbox (not freed); reports a failure. Returns 0 or -1. */
int cli_sandbox_destroy(sbx_sandbox *sandbox);

/* What run, exec-code and agent run in their one-shot sandbox. */
typedef struct cli_oneshot {
    const char *const *argv;  /* run: the command */
    const char *language;     /* exec-code: NULL for python */
    const char *code;         /* exec-code: non-NULL selects execute_code */
    cli_terminal term;        /* run: -i and -t */
    const char *user;         /* run: -u, the user the command runs as (NULL: default) */
    /* agent: non-NULL selects run_agent (its timeout_secs is set from the
     * options'); the finished run is stored in *agent_run (the caller's to
     * free), or its failure reported. */
    const sbx_agent_request *agent;
    sbx_agent_run **agent_run;
} cli_oneshot;

/* How much longer than its command's timeout (-t) the one-shot sandbox of
 * run and exec-code lives, so that the timeout (TERM, then KILL: exit 124)
 * is what ends the command, not the end of the sandbox's lifetime. */
#define CLI_ONESHOT_LIFETIME_GRACE_SECS 10.0

/*
 * Creates a sandbox on @backend with @options, runs @what in it on a worker
 * thread (the main thread destroys the sandbox on a stop signal, which
 * ends the command), destroys the sandbox in every case and returns the
 * exit status for the tool. The timeout_secs of @options becomes the
 * command's timeout; the sandbox's lifetime is set to it plus
 * CLI_ONESHOT_LIFETIME_GRACE_SECS. After --no-lifetime
 * (cli_creation_no_lifetime) the sandbox has none, and the command's
 * timeout is --timeout's when given, else none.
 */
int cli_oneshot_run(const char *backend, sbx_options *options, const cli_oneshot *what);

#endif /* SBX_CLI_H */
