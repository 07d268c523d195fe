/*
 * Helpers shared by the Criterion test programs: the backend under test,
 * a monotonic clock, temporary directories, running commands in a sandbox
 * and comparing their output byte for byte, SHA-256, process checks, and
 * the control routes of the hosted backends' contract fakes.
 *
 * Helpers whose names end in nothing special assert with Criterion and
 * never return on failure; the ones documented as returning a status do not
 * assert.
 */
#ifndef SBX_TESTUTIL_H
#define SBX_TESTUTIL_H

#include <stddef.h>
#include <sys/types.h>

#include <sbx/sbx.h>

/* The backend the conformance suite runs on: $SBX_TEST_BACKEND, else
 * "local". */
const char *tu_backend(void);
/* 1 on local and on safehouse (local with every command wrapped by the
 * safehouse CLI): the same host-side internals. */
int tu_backend_is_local(void);
/* 1 where the sandbox is a host directory and its commands share this
 * host's process table: local, safehouse, and remote over a control plane
 * whose upstream (BESPOKE_SANDBOX_BACKEND) is one of them. Its internals
 * (supervisor, state, messages) are local's only for tu_backend_is_local. */
int tu_backend_host_dirs(void);

/* CLOCK_MONOTONIC in seconds. */
double tu_now(void);

/* printf into a new string (free()); asserts on failure. */
char *tu_strdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A fresh directory under ${TMPDIR:-/tmp} (the caller's TMPDIR at the time
 * of the call); returns its path (free()). */
char *tu_mkdtemp(const char *prefix);
/* Same, and exports it as TMPDIR for the rest of the process. */
char *tu_fresh_tmpdir(void);
/* rm -rf; missing paths are fine. Waits first (at most 5 s) for the trash
 * of destroyed local sandboxes directly in @path (".sbx-trash-*", which
 * their supervisors remove just after destroy returned). */
void tu_rmtree(const char *path);
/* 1 when @path exists (lstat), else 0. */
int tu_exists(const char *path);
/* Number of entries of directory @path (without . and ..), -1 if it cannot
 * be opened; counted once the trash of destroyed local sandboxes is gone
 * from it (as tu_rmtree waits: at most 5 s, after which it counts). A local
 * client's spare (.sbx-spare-*: a directory made ahead for its next
 * sandbox, which lives as long as the client) is not counted. */
int tu_count_entries(const char *path);
/* Waits up to @secs until directory @path holds no local client's spare
 * (.sbx-spare-*); returns how many are left then. */
int tu_wait_spares_gone(const char *path, double secs);
/* Writes @len bytes to a new file @path with @mode; asserts. */
void tu_write_file(const char *path, const void *data, size_t len, unsigned mode);

/* Creates a sandbox on @client with @options; asserts success. */
sbx_sandbox *tu_create(sbx_client *client, const sbx_options *options);

/* Runs @req; asserts that the call succeeded and returns the result. */
sbx_result *tu_exec(sbx_sandbox *sb, const sbx_exec_request *req);
/* Runs the shell script @script with @timeout_secs (0 = sandbox default);
 * asserts that the call succeeded. */
sbx_result *tu_sh(sbx_sandbox *sb, const char *script, double timeout_secs);
/* Runs @req; asserts that the call FAILED with @code and returns the error
 * (sbx_error_free()). */
sbx_error *tu_exec_fail(sbx_sandbox *sb, const sbx_exec_request *req,
                        sbx_error_code code);

/* The expiry @err names (its context expires_at, "YYYY-MM-DDTHH:MM:SSZ",
 * UTC, nothing after it; asserted) as UNIX seconds. */
double tu_expires_at(const sbx_error *err);
/* Asserts that @err (an exec's, a resume's) names the end of the lifetime
 * of sandbox @id: its context expires_at is "YYYY-MM-DDTHH:MM:SSZ" (UTC,
 * nothing after it), from @lifetime seconds after @wall0 (UNIX seconds,
 * taken just before the create; 1 s allowed for the whole second) to
 * @lifetime seconds after @wall0 + @took (seconds from the create to the
 * sandbox's end), and its message is exactly "sandbox ID expired at WHEN
 * (lifetime N s)" (N as %g). Returns that message: a new string (free()),
 * for the calls that must say the same. */
char *tu_assert_expired(const sbx_error *err, const char *id, double wall0, double took,
                        double lifetime);

/* Asserts that (@got, @got_len) equals (@want, @want_len) byte for byte,
 * reporting the first difference. @what names the buffer. */
void tu_assert_bytes(const char *what, const void *got, size_t got_len,
                     const void *want, size_t want_len);
/* The same against the result's streams (NUL-terminated @want). */
void tu_assert_stdout(const sbx_result *r, const char *want);
void tu_assert_stderr(const sbx_result *r, const char *want);
void tu_assert_stdout_bytes(const sbx_result *r, const void *want, size_t len);
void tu_assert_stderr_bytes(const sbx_result *r, const void *want, size_t len);
/* Asserts exit code, timed_out 0 and both truncated flags 0. */
void tu_assert_exit(const sbx_result *r, int code);

/* SHA-256 of @len bytes as 64 lowercase hex digits + NUL. */
void tu_sha256_hex(const void *data, size_t len, char hex[65]);

/* The rendering sbx_error_to_string() must produce, built from the
 * error's accessors: "MSG [code=C[, retryable][; backend=B][; op=O]
 * [; k=v]...]". free(). */
char *tu_expected_error_string(const sbx_error *error);
/* Asserts that @error is set, has @code, and that its message contains
 * every NULL-terminated substring given. */
void tu_assert_error(const sbx_error *error, sbx_error_code code, ...);

/* Reads whitespace-separated decimal pids from the sandbox file
 * @sandbox_path (e.g. "$SANDBOX_ROOT/tmp/pids") via `cat`; returns how
 * many were stored (asserts at least one). */
size_t tu_read_pids(sbx_sandbox *sb, const char *sandbox_path, pid_t *pids,
                    size_t max);
/* 1 when @pid no longer runs: kill(pid, 0) fails with ESRCH, or the
 * process has exited and only waits to be reaped (state Z or X). */
int tu_pid_gone(pid_t pid);
/* Stops @pid with SIGSTOP and waits (up to 5 s, asserted) until it is
 * stopped (state T): the signal takes effect only once @pid runs again. */
void tu_stop_pid(pid_t pid);
/* SIGCONT to every process tu_stop_pid() stopped in this test process
 * (a suite's fini calls it, so that a failed test leaves none stopped:
 * a stopped supervisor cannot see its owner end). */
void tu_continue_stopped(void);
/* The host pid of the process with pid @pid in sandbox @sb (they differ on
 * bubblewrap, whose sandboxes have a pid namespace each; elsewhere @pid). */
pid_t tu_host_pid(sbx_sandbox *sb, pid_t pid);
/* The bwrap process of bubblewrap sandbox @id: the one process named bwrap
 * whose command line names the sandbox's directory (the supervisor holds a
 * descriptor naming it too); asserts there is exactly one. */
pid_t tu_bwrap_pid(const char *id);
/* Waits up to @secs for tu_pid_gone(); returns its last value. */
int tu_wait_pid_gone(pid_t pid, double secs);
/* "pid N: state S, parent P, COMMAND" or "pid N: gone", for messages;
 * a static buffer. */
const char *tu_proc_describe(pid_t pid);
/* The parent pid of @pid (from /proc), or -1 when it is gone. */
pid_t tu_ppid(pid_t pid);
/* Walks /proc: the pids of the processes (other than this one) for which
 * @match(pid, @ud) returns 1, in /proc's order. Stores at most @max in
 * @pids (which may be NULL, to count) and returns how many matched, up to
 * @max. */
size_t tu_pids_where(int (*match)(pid_t pid, void *ud), void *ud, pid_t *pids, size_t max);
/* The command line of @pid, its arguments joined by spaces, into @buf
 * (@cap bytes, NUL-terminated, cut to fit); its length, or -1 when it
 * cannot be read or is empty (a kernel thread, a zombie). */
ssize_t tu_cmdline(pid_t pid, char *buf, size_t cap);
/* Pids of processes (other than this one) whose cwd, command line,
 * environment or open descriptors mention @path, and that still run.
 * Returns how many were stored in @pids (at most @max). */
size_t tu_procs_mentioning(const char *path, pid_t *pids, size_t max);
/* tu_procs_mentioning(), asked again every 20 ms until it finds none or
 * @secs pass, and then 30 s more (a sandbox's processes may still be
 * ending after destroy returned, on a busy machine): the count of the last
 * answer (0 when all were gone). */
size_t tu_wait_procs_gone(const char *path, pid_t *pids, size_t max, double secs);
/* @count() asked every 100 ms until it returns @want or @secs pass: its
 * last answer. */
size_t tu_wait_count(size_t (*count)(void), size_t want, double secs);

/* 1 when @pid runs the plugin host program ($SBX_PLUGIN_HOST). */
int tu_is_plugin_host(pid_t pid);


/* ------------------------------------------------------------------------
 * The contract fakes of the hosted backends (tests/fakes/fakehttp.py): their
 * control routes (/_fake/faults, /_fake/log, ...) on the provider's port.
 * ---------------------------------------------------------------------- */

struct json_object;

/* Takes the fake's port from the environment variable @env holding its URL
 * ("http://127.0.0.1:PORT..."), for the calls below; asserts that it names
 * one (run through tests/hosted.sh). Returns the port. */
int tu_fake_use(const char *env);
/* One HTTP/1.1 request to the fake (Connection: close) with @body as JSON
 * (NULL: none) and the extra header line @header ("Name: value"; NULL:
 * none): the status, and the answer's body in *@out (malloc()ed,
 * NUL-terminated; may be NULL) when @out is not NULL. Asserts that an
 * answer came. */
int tu_fake_http(const char *method, const char *path, const char *header, const char *body,
                 char **out);
/* POST @body to the control route @path; asserts 200 or 204. */
void tu_fake_post(const char *path, const char *body);
/* Removes the fault rules and empties the request log. */
void tu_fake_reset(void);
/* The request log, parsed (json_object_put() it); asserts it is a list. */
struct json_object *tu_fake_log(void);
/* Member @key of @o as a string (borrowed), or NULL. */
const char *tu_json_str(struct json_object *o, const char *key);
/* The entries of @log with @method whose path matches the extended regex
 * @re (whole path): how many; the times (UNIX seconds) of the first @tmax
 * of them go to @t (may be NULL). */
int tu_fake_count(struct json_object *log, const char *method, const char *re, double *t,
                  size_t tmax);
/* Files through a hosted backend's plugin, for the suites of the backends
 * whose fakes run real sandboxes (e2b, daytona, tensorlake); each asserts
 * exact values on @sb:
 * - tu_files_case17: CASE-17: 1 MiB of the byte values 0x00..0xFF
 *   repeated, written and read back byte-exact (its sha256 in the sandbox
 *   too), and a host tree (a file of the 256 byte values, the 1 MiB file,
 *   an empty file in a subdirectory) through upload_dir and download_dir,
 *   4 entries each way, byte-exact;
 * - tu_files_list_exact: list_files of a directory of two files and a
 *   subdirectory: exactly three entries, sorted, with name, path, kind and
 *   size; a missing directory is not_found naming it, and the sandbox works
 *   on;
 * - tu_files_home_is_writable: $HOME is an absolute directory other than
 *   /, writable by the commands' user and through write_file;
 * - tu_files_case45: CASE-45: what write_file, upload_file and upload_dir
 *   make in $HOME (from a host tree owned by 4242:4242) belongs to the
 *   commands' user, who can append, create and remove there; $HOME keeps
 *   its owner and mode; download_dir gives files of this process's user
 *   (needs root here for the chown; skipped saying so otherwise);
 * - tu_files_case46: CASE-46: the working directory holds for every part
 *   of a command list (C1..C7), and a missing one is not_found before any
 *   part runs (C8). */
void tu_files_case17(sbx_sandbox *sb);
void tu_files_list_exact(sbx_sandbox *sb);
void tu_files_home_is_writable(sbx_sandbox *sb);
void tu_files_case45(sbx_sandbox *sb);
void tu_files_case46(sbx_sandbox *sb);
/* A backend whose API carries text only (JSON strings, or protobuf string
 * fields: e2b, daytona, tensorlake, blaxel, runloop, vercel, cloudflare,
 * modal) refuses what that text cannot carry before it sends anything: an
 * exec of argv {"printf", "%s", "\xff\xfe"}, of the shell command
 * "printf '%s' '\xff'", with env C=\xff\xfe (unless TU_TEXT_ENV_AS_BYTES),
 * in cwd /tmp/\xff, and, as @parts says, write_file, read_file and
 * list_files of /tmp/\xff\xfe, each fail with invalid_argument, backend
 * @backend, the exact message naming the part ("argument 2 is not valid
 * UTF-8: the provider's API (JSON) cannot carry it", ...; "(protobuf)" with
 * TU_TEXT_PROTOBUF), context argument=2 / env_name=C, and its op; the fake
 * logged no request for any of them. With TU_TEXT_ENV_AS_BYTES an exec
 * with env C=\xff\xfe then prints exactly those two bytes. No file
 * /tmp/\xff\xfe is left in the sandbox. */
#define TU_TEXT_WRITE 0x1u          /* write_file's path goes as text (its chmod is a command) */
#define TU_TEXT_LIST 0x2u           /* list_files's path goes as text */
#define TU_TEXT_READ 0x4u           /* read_file's path goes as text */
#define TU_TEXT_ENV_AS_BYTES 0x8u   /* the per-call env goes as a staged file's bytes */
#define TU_TEXT_PROTOBUF 0x10u      /* the API is protobuf (the messages say so) */
void tu_json_text_refused(const char *backend, sbx_sandbox *sb, unsigned parts);

/* How many TCP connections the requests of @log came on (the distinct
 * "conn" numbers the fake gives its entries). */
int tu_fake_connections(struct json_object *log);
/* Connection reuse at the fake: one exec on @sb to warm it, the fake's log
 * emptied, then @n warm execs one after another ("echo warm-I", each
 * asserted): the fake logged exactly @n * @per_exec requests, all on one
 * connection. */
void tu_fake_assert_warm_execs_share_a_connection(sbx_sandbox *sb, int n, int per_exec);
/* Empties the fake's log, makes it answer @status to every POST whose path
 * matches @path_re, and asserts that a create on @client fails with @code
 * and a message holding "(HTTP @status)", after exactly one such POST (the
 * create is not retried). The rule stays until the fixture's reset. */
void tu_fake_assert_create_answered(sbx_client *client, const char *path_re, int status,
                                    sbx_error_code code);

/* For each JSON text in @bad (NULL-terminated): a client of @backend made
 * with the config {"@key":VALUE} is refused with a configuration error
 * whose message is exactly "@backend client option @key VALUE is not a
 * number of seconds @range" (@range "from 0 to 86400", say) and whose
 * context option is @key. */
void tu_assert_bad_seconds_option(const char *backend, const char *key, const char *const *bad,
                                  const char *range);

/* The length of the JSON array the fake answers 200 to GET @path (extra
 * header line @header, NULL: none): the answer itself, or its member
 * @member (NULL: the answer); asserts the status and the array. */
size_t tu_fake_array_length(const char *path, const char *header, const char *member);
/* list_owned through the provider's pages: @sbs, three live sandboxes of
 * @client, are listed by sbx_client_list_owned() after the fake's rules
 * and log are emptied and its list pages cut to one item each (POST
 * /_fake/config {"page_cap": 1}); asserts that it returns 3, that each of
 * the three was listed once and no other sandbox, and that the fake logged
 * 3 GETs or more whose path matches the extended regex @list_re (whole
 * path). The three are destroyed and freed (their slots set NULL) before
 * the counts are asserted. */
void tu_fake_assert_list_owned_pages(sbx_client *client, sbx_sandbox *sbs[3], const char *list_re);

/* CASE-48 on the hosted backend @backend through its fake: canaries are
 * put in this process's environment (E2B_API_KEY, ANTHROPIC_API_KEY,
 * AWS_SECRET_ACCESS_KEY, BESPOKE_CONTROL_PLANE_ADMIN_TOKEN, SSH_AUTH_SOCK;
 * each holding "TESTSECRET"; the one named @own, the backend's own
 * credential variable, is left alone), a client of @backend is made after
 * them and a sandbox created with env WANTED=yes only; a command prints
 * its environment and every /proc/N/environ and cmdline it can read.
 * Asserts that WANTED=yes is there, no TESTSECRET and no SSH_AUTH_SOCK, and
 * that no request the fake logged holds TESTSECRET. The sandbox is
 * destroyed, the client freed and the canaries unset again. */
void tu_fake_assert_env_canaries(const char *backend, const char *own);

/* CASE-19 on is_alive's read of @sb, GET @route followed by the sandbox's
 * id (@route "/sandboxes/" reads "/sandboxes/ID"), through the fake of @sb's
 * backend. Each first removes the fake's rules and empties its log, then
 * makes it answer that read 429 "slow down" (the provider's error body)
 * and calls sbx_sandbox_is_alive(@sb) once; the times compared are the
 * fake's (its log, UNIX seconds). The rule stays until the fixture's reset.
 * They use the fake's one log and rules: one test at a time, from one
 * thread. Nothing is returned; a failed assertion ends the test.
 * - tu_fake_assert_retry_after_seconds_waited: twice with Retry-After: 2:
 *   is_alive is 1 after exactly 3 GETs, each retry >= 2.0 s after the 429
 *   before it;
 * - tu_fake_assert_retry_after_date_waited: once with Retry-After as the
 *   HTTP-date 3 s after the answer's Date: is_alive is 1 after exactly 2
 *   GETs, >= 2.5 s apart (0.5 s allowed for skew);
 * - tu_fake_assert_retry_after_past_the_cap_rate_limited: once with
 *   Retry-After: 3600, past the wait cap (60 s): is_alive is -1 within
 *   30 s after exactly 1 GET, the error rate_limited and retryable, backend
 *   @backend, op "is_alive", message exactly "get the sandbox: slow down
 *   (HTTP 429; the provider asks to wait 3600 s)", context retry_after_s
 *   "3600" and http_status "429";
 * - tu_fake_assert_backoff_without_retry_after: once without Retry-After:
 *   is_alive is 1 after exactly 2 GETs, >= 0.5 s apart (no tight loop). */
void tu_fake_assert_retry_after_seconds_waited(sbx_sandbox *sb, const char *route);
void tu_fake_assert_retry_after_date_waited(sbx_sandbox *sb, const char *route);
void tu_fake_assert_retry_after_past_the_cap_rate_limited(const char *backend, sbx_sandbox *sb,
                                                          const char *route);
void tu_fake_assert_backoff_without_retry_after(sbx_sandbox *sb, const char *route);

/* CASE-36 on the hosted backend @backend through its fake: the key is the
 * value of the environment variable @key_var (asserted set, 8 characters
 * or more), @client a client of @backend (asserted) and @sb a live sandbox
 * of it (borrowed; left live). Removes the fake's rules and empties its
 * log, makes it answer the create, POST @create_path (a path, matched
 * whole), 401 with "invalid key KEY" in the provider's error body, and
 * asserts: the create on @client fails authentication, backend @backend,
 * op "create", message exactly "create the sandbox: invalid key [redacted]
 * (HTTP 401)", and neither sbx_error_to_string() nor any context value
 * holds the key; the session state of @sb does not hold it; "echo fine"
 * runs on @sb (10 s); the fake logged 2 requests or more, none holding the
 * key, every one authorized ("auth" "Bearer <redacted>"), the first the
 * create, whose header @key_header (any case) carries the key as the fake
 * redacts it ("Bearer <redacted>" for Authorization, else "<redacted>").
 * The rule stays until the fixture's reset. One test at a time, from one
 * thread; a failed assertion ends the test. */
void tu_fake_assert_credential_scrubbed(const char *backend, const char *key_var,
                                        sbx_client *client, sbx_sandbox *sb,
                                        const char *create_path, const char *key_header);

/* The integers of the JSON array member @key of the fake's answer 200 to
 * GET @path (extra header @header, NULL: none), joined by ',' ("3000,8080";
 * "" for none): a new string. Asserts the answer and the member. */
char *tu_fake_ints(const char *path, const char *header, const char *key);

/* A TCP port of 127.0.0.1 that nothing listens on now: the kernel's pick
 * for a socket bound to port 0, closed again (another process may take it
 * later; the tests that use it want a refused connection or a port to
 * expose). Asserts the socket calls. */
unsigned tu_free_port(void);

/* ------------------------------------------------------------------------
 * Exposed ports (sbx_options_add_port, sbx_sandbox_resolve_port, ...): what
 * the hosted backends' tests check alike.
 * ---------------------------------------------------------------------- */

/* Creates a sandbox on @client exposing the @n ports @ports (default
 * options otherwise); asserts success. */
sbx_sandbox *tu_create_with_ports(sbx_client *client, const uint16_t *ports, size_t n);
/* Asserts that @port of @sb resolves to @want. */
void tu_assert_port_url(sbx_sandbox *sb, unsigned port, const char *want);
/* Asserts that @port of @sb is not exposed: resolve_port fails with
 * not_found "@backend sandbox ID: port N is not exposed", context port=N. */
void tu_assert_port_not_exposed(sbx_sandbox *sb, const char *backend, unsigned port);
/* Asserts that the exposed ports of @sb (sbx_sandbox_list_ports) are @want,
 * ascending and joined by ',' ("3000,8080"; "" for none). */
void tu_assert_ports(sbx_sandbox *sb, const char *want);

/* ------------------------------------------------------------------------
 * Output that reaches the callback while the command runs.
 * ---------------------------------------------------------------------- */

/* Runs on @sb a command that prints "first", then waits (up to 10 s) for
 * the file @marker_in_sandbox, which only its output callback makes (at
 * @marker_on_host, the same file seen from this host) on seeing that line;
 * it prints "second" when the file came, "never" when output reached the
 * callback only at the command's end, then "done" on stderr and exits 7.
 * Asserts exactly that: the callback made the file, exit 7, stdout
 * "first\nsecond\n" in the result and through the callback, stderr
 * "done\n". Removes the file. */
void tu_assert_output_is_live(sbx_sandbox *sb, const char *marker_on_host,
                              const char *marker_in_sandbox);

/* ------------------------------------------------------------------------
 * The library's debug log (SBX_DEBUG=1 on stderr), captured to check that
 * no secret reaches it.
 * ---------------------------------------------------------------------- */

typedef struct tu_debug_log {
    char path[64];      /* the temporary file stderr goes to (unlinked at once) */
    int fd;             /* it, open: the only way to it */
    int saved;          /* the stderr before */
} tu_debug_log;

/* Sets SBX_DEBUG=1 and sends stderr to a new temporary file. Call before
 * the client is made (it reads SBX_DEBUG). */
void tu_debug_log_start(tu_debug_log *l);
/* Puts stderr back, unsets SBX_DEBUG and closes the file: what was
 * written there (a new string). */
char *tu_debug_log_stop(tu_debug_log *l);
/* The slots the plugin host was called with since byte *@from of the
 * captured log @l (its "plugin host: call SLOT" lines), comma-separated in
 * their order ("" when none; a new string); *@from moves to the log's
 * end. */
char *tu_host_calls_since(const tu_debug_log *l, off_t *from);

/* Starts tests/fakes/idlereaper.py in front of 127.0.0.1:@target, closing
 * a connection after @idle seconds without a byte either way (as a proxy
 * that ends quiet connections does): its port. One at a time; stopped by
 * tu_reaper_stop() (by its pid). */
int tu_reaper_start(int target, int idle);
/* Stops the idle reaper: the connections it reaped (its "REAPED n"
 * lines); 0 when none runs. */
int tu_reaper_stop(void);

#endif /* SBX_TESTUTIL_H */
