/*
 * test_local.c — what no process but a local or bubblewrap sandbox's own
 * supervisor may do, and what happens when the supervisor dies:
 *
 * - a listener put in place of a sandbox's socket (the socket renamed
 *   away, another process listening at its path) receives nothing: exec
 *   and is_alive refuse it with an authentication error naming its pid,
 *   resume still attaches, and destroy ends the real sandbox by pid (its
 *   background processes included) and removes its directory;
 * - a session state cannot choose what destroy removes: a "root" and
 *   "made_tmp" that disagree with the sandbox's record, a planted
 *   directory of another user or with group/other rights, a planted
 *   record that others may write: all refused, the victim tree unchanged;
 * - kill -9 of a sandbox's supervisor: within 5 s no process of the
 *   sandbox is left (setsid'd and double-forked background processes, an
 *   exec in flight and the exec reapers), and resume (what `sbx rm` does)
 *   says not_found and removes the directory, and so does `sbx rm`;
 * - a command with a timeout of 1 s sent to a sandbox whose supervisor is
 *   stopped (SIGSTOP), in both plugin modes, out of process both straight
 *   to the supervisor and through the plugin host: the call fails within
 *   5 s with a timeout error saying the command did not start and never
 *   will, and after SIGCONT it never runs; a supervisor continued after the
 *   timeout refuses the request it reads late;
 * - random frames on a sandbox's socket leave its supervisor serving;
 * - destroy returns once no process the sandbox's commands started is
 *   alive (background and escaped ones included), the supervisor's idle
 *   exec reapers and the supervisor ending just after;
 * - a spare directory made ahead by a client's warm supervisor goes with
 *   it when the process holding it is SIGKILLed;
 * - destroy returns with the meta directory renamed to its trash name,
 *   which the supervisor removes after answering, its keeper when the
 *   supervisor is killed first, and a sweep (proto_sweep_trash) when
 *   both are gone; a trash the supervisor cannot remove is all its keeper
 *   removes (a tmp directory in the caller's workdir stays);
 * - all of it as root and as uid 65534 (the whole program again, staged
 *   where nobody can read it).
 *
 * Runs from the build directory with the variables of `make check`.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include <sbx/sbx.h>
#include <sbx/plugin.h>

#include "testutil.h"
#include "../plugins/local/proto.h"

static char *g_tmp;

static void setup(void)
{
    g_tmp = tu_fresh_tmpdir();
}

static void teardown(void)
{
    tu_continue_stopped();
    tu_rmtree(g_tmp);
    free(g_tmp);
    g_tmp = NULL;
}

TestSuite(supervisor, .init = setup, .fini = teardown, .timeout = 120);
TestSuite(warm, .init = setup, .fini = teardown, .timeout = 60);

static sbx_client *client_of(const char *backend)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new(backend, &err);
    cr_assert_not_null(c, "sbx_client_new(%s): %s", backend,
                       err ? sbx_error_get0_message(err) : "");
    return c;
}

static char *session_state(sbx_sandbox *sb)
{
    sbx_error *err = NULL;
    char *json = sbx_sandbox_session_state(sb, &err);
    cr_assert_not_null(json, "session_state: %s", err ? sbx_error_get0_message(err) : "");
    return json;
}

/* A member of the state's "data" as a string (free()) or an integer. */
static char *state_str(const char *json, const char *key)
{
    json_object *doc = json_tokener_parse(json), *data, *v;
    cr_assert(doc && json_object_object_get_ex(doc, "data", &data)
              && json_object_object_get_ex(data, key, &v), "%s has no %s", json, key);
    char *s = strdup(json_object_get_string(v));
    json_object_put(doc);
    cr_assert_not_null(s);
    return s;
}

static long long state_int(const char *json, const char *key)
{
    char *s = state_str(json, key);
    long long v = strtoll(s, NULL, 10);
    free(s);
    return v;
}

/* @json with data member @key set to @value (a JSON text); free(). */
static char *state_with(const char *json, const char *key, const char *value)
{
    json_object *doc = json_tokener_parse(json), *data;
    cr_assert(doc && json_object_object_get_ex(doc, "data", &data));
    json_object_object_add(data, key, json_tokener_parse(value));
    char *s = strdup(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN
                                                         | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(doc);
    return s;
}

static void expect_sh(sbx_sandbox *sb, const char *script, const char *want)
{
    sbx_result *r = tu_sh(sb, script, 30);
    tu_assert_stderr(r, "");
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, want);
    sbx_result_free(r);
}

static int child_of(pid_t pid, void *parent)
{
    return tu_ppid(pid) == *(pid_t *)parent && !tu_pid_gone(pid);
}

/* Pids (host view) of the supervisor's children: its exec reapers. */
static size_t children_of(pid_t parent, pid_t *out, size_t max)
{
    return tu_pids_where(child_of, &parent, out, max);
}

/* ---------------------------------------------------------------- impostor */

/* Frames of the supervisor protocol (plugins/local/proto.h): u32 type,
 * u32 length, payload, host byte order. */
enum { F_EXEC = 5, F_STARTED = 6, F_EXIT = 7, F_PING = 10, F_PONG = 11, F_DESTROY = 12,
       F_DESTROYED = 13, F_EXEC_QUIET = 23 };

static void put_frame(int fd, uint32_t type, int32_t value)
{
    uint32_t f[3] = { type, sizeof(int32_t), (uint32_t)value };
    if (write(fd, f, sizeof f) < 0)
        _exit(90);
}

/*
 * A process listening at @path in place of a sandbox's supervisor. It
 * appends every byte it receives to @log and answers as the reproducer's
 * did: EXEC with STARTED and EXIT 0, DESTROY with DESTROYED, PING with
 * PONG. Returns its pid once it listens.
 */
static pid_t impostor_start(const char *path, const char *log)
{
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        int out = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
        int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (out < 0 || l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) < 0
            || listen(l, 16) < 0)
            _exit(91);
        if (write(ready[1], "r", 1) != 1)
            _exit(92);
        close(ready[1]);
        for (;;) {
            int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
            if (c < 0)
                continue;
            unsigned char buf[65536];
            struct pollfd p = { .fd = c, .events = POLLIN };
            while (poll(&p, 1, 2000) > 0) {
                ssize_t n = read(c, buf, sizeof buf);
                if (n <= 0)
                    break;
                if (write(out, buf, (size_t)n) != n)
                    _exit(93);
                uint32_t type;
                memcpy(&type, buf, sizeof type);
                if (n >= 8 && type == F_EXEC) {
                    put_frame(c, F_STARTED, 4242);
                    put_frame(c, F_EXIT, 0);
                } else if (n >= 8 && type == F_DESTROY) {
                    put_frame(c, F_DESTROYED, 0);
                    break;
                } else if (n >= 8 && type == F_PING) {
                    put_frame(c, F_PONG, 2);
                }
            }
            close(c);
        }
    }
    close(ready[1]);
    char r;
    cr_assert_eq(read(ready[0], &r, 1), 1, "the impostor did not start");
    close(ready[0]);
    return pid;
}

static void impostor_stop(pid_t pid)
{
    int status;
    cr_assert_eq(kill(pid, SIGKILL), 0, "the impostor %d is gone", (int)pid);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Destroys @sb and checks that it ended by pid: its supervisor @sup and
 * background process @bg are gone, and so is its directory @meta. */
static void destroy_ends_it(sbx_sandbox *sb, pid_t sup, pid_t bg, const char *meta)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert(tu_wait_pid_gone(sup, 5.0), "the supervisor survived: %s", tu_proc_describe(sup));
    cr_assert(tu_wait_pid_gone(bg, 5.0), "the background sleep survived: %s",
              tu_proc_describe(bg));
    cr_assert(!tu_exists(meta), "destroy left %s", meta);
}

/* The reproducer inverted on @backend (local: its socket is in reach of
 * anything running as this user, so the takeover is staged from here). */
static void impostor_is_refused(const char *backend)
{
    setenv("SBX_TEST_BACKEND", backend, 1);     /* for tu_host_pid */
    sbx_client *client = client_of(backend);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_env(o, "API_KEY", "k-123-secret", NULL), 0);
    sbx_sandbox *sb = tu_create(client, o);
    sbx_options_free(o);
    /* A background process that must end with the sandbox. */
    expect_sh(sb, "setsid sleep 1000 >/dev/null 2>&1 </dev/null & echo $! > \"$TMPDIR/bg.pid\"",
              "");
    pid_t bg;
    cr_assert_eq(tu_read_pids(sb, "$TMPDIR/bg.pid", &bg, 1), 1);
    bg = tu_host_pid(sb, bg);
    cr_assert_eq(tu_pid_gone(bg), 0);

    char *json = session_state(sb);
    char *meta = state_str(json, "meta");
    pid_t sup = (pid_t)state_int(json, "supervisor_pid");
    char *sock = tu_strdup_printf("%s/sock", meta);
    char *moved = tu_strdup_printf("%s/sock.real", meta);
    char *log = tu_strdup_printf("%s/impostor.log", g_tmp);
    cr_assert_eq(rename(sock, moved), 0, "rename %s: %s", sock, strerror(errno));
    pid_t imp = impostor_start(sock, log);

    /* exec: refused before anything is sent, naming the impostor. */
    char *want = tu_strdup_printf("is served by pid %d", (int)imp);
    sbx_error *err = tu_exec_fail(sb, &(sbx_exec_request){
                                      .struct_size = sizeof(sbx_exec_request),
                                      .shell = "echo $API_KEY" }, SBX_ERROR_AUTHENTICATION);
    tu_assert_error(err, SBX_ERROR_AUTHENTICATION, want, "not by its supervisor", NULL);
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(sbx_sandbox_is_alive(sb, &err), -1);
    tu_assert_error(err, SBX_ERROR_AUTHENTICATION, want, NULL);
    sbx_error_clear(&err);

    /* resume still attaches (the supervisor lives), and refuses to exec. */
    sbx_sandbox *again = sbx_sandbox_resume(client, json, &err);
    cr_assert_not_null(again, "resume: %s", err ? sbx_error_get0_message(err) : "");
    err = tu_exec_fail(again, &(sbx_exec_request){ .struct_size = sizeof(sbx_exec_request),
                                                  .argv = (const char *[]){ "true", NULL } },
                       SBX_ERROR_AUTHENTICATION);
    sbx_error_free(err);
    err = NULL;

    /* destroy ends the real sandbox by pid, forged answers or not. */
    destroy_ends_it(again, sup, bg, meta);
    /* The impostor got not one byte: no argv, no env, no descriptor. */
    cr_assert_eq(tu_pid_gone(imp), 0, "destroy killed a process outside the sandbox");
    cr_assert_eq(file_size(log), 0, "the impostor received %lld bytes", file_size(log));
    impostor_stop(imp);

    sbx_sandbox_free(again);
    sbx_sandbox_free(sb);
    sbx_client_free(client);
    free(want);
    free(log);
    free(moved);
    free(sock);
    free(meta);
    free(json);
}

Test(supervisor, local_impostor_listener_gets_nothing_and_destroy_ends_the_sandbox)
{
    impostor_is_refused("local");
}

/* The peer check compares the uid too: with the record naming another
 * uid, the real supervisor is refused like an impostor (and destroy still
 * ends it by pid). */
Test(supervisor, a_listener_of_another_uid_than_recorded_is_refused)
{
    sbx_client *client = client_of("local");
    sbx_sandbox *sb = tu_create(client, NULL);
    char *json = session_state(sb);
    char *meta = state_str(json, "meta");
    pid_t sup = (pid_t)state_int(json, "supervisor_pid");
    char *rec = tu_strdup_printf("%s/record", meta);
    json_object *doc = json_object_from_file(rec), *v;
    cr_assert(doc && json_object_object_get_ex(doc, "supervisor_uid", &v), "%s", rec);
    cr_assert_eq(json_object_get_int64(v), (int64_t)geteuid());
    json_object_object_add(doc, "supervisor_uid", json_object_new_int64((int64_t)geteuid() + 1));
    const char *text = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN
                                                           | JSON_C_TO_STRING_NOSLASHESCAPE);
    int fd = open(rec, O_WRONLY | O_TRUNC | O_CLOEXEC);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    json_object_put(doc);

    sbx_error *err = NULL;
    sbx_sandbox *again = sbx_sandbox_resume(client, json, &err);
    cr_assert_not_null(again, "resume: %s", err ? sbx_error_get0_message(err) : "");
    char *want = tu_strdup_printf("is served by pid %d (uid %u), not by its supervisor "
                                  "(pid %d, uid %u)", (int)sup, (unsigned)geteuid(), (int)sup,
                                  (unsigned)geteuid() + 1);
    err = tu_exec_fail(again, &(sbx_exec_request){ .struct_size = sizeof(sbx_exec_request),
                                                  .shell = "echo hi" },
                       SBX_ERROR_AUTHENTICATION);
    tu_assert_error(err, SBX_ERROR_AUTHENTICATION, want, NULL);
    sbx_error_free(err);
    cr_assert_eq(sbx_sandbox_destroy(again, NULL), 0);
    cr_assert(tu_wait_pid_gone(sup, 5.0), "the supervisor survived: %s", tu_proc_describe(sup));
    cr_assert(!tu_exists(meta));
    sbx_sandbox_free(again);
    sbx_sandbox_free(sb);
    sbx_client_free(client);
    free(want);
    free(rec);
    free(meta);
    free(json);
}

/* A supervisor that does not answer (stopped here; hung alike) still
 * resumes, so that destroy can end it: every other call is refused as
 * timed out, and destroy kills its tree by pid and removes its directory
 * (`sbx rm` of a frozen sandbox leaves nothing). A stopped supervisor gets
 * no ping (a hung one is waited for 5 s), so its resume does not wait. */
Test(supervisor, a_supervisor_that_does_not_answer_resumes_for_destroy_only)
{
    setenv("SBX_TEST_BACKEND", "local", 1);     /* for tu_host_pid */
    sbx_client *client = client_of("local");
    sbx_sandbox *sb = tu_create(client, NULL);
    expect_sh(sb, "setsid sleep 1000 >/dev/null 2>&1 </dev/null & echo $! > \"$TMPDIR/bg.pid\"",
              "");
    pid_t bg;
    cr_assert_eq(tu_read_pids(sb, "$TMPDIR/bg.pid", &bg, 1), 1);
    bg = tu_host_pid(sb, bg);
    char *json = session_state(sb);
    char *meta = state_str(json, "meta");
    pid_t sup = (pid_t)state_int(json, "supervisor_pid");
    tu_stop_pid(sup);

    sbx_error *err = NULL;
    double t0 = tu_now();
    sbx_sandbox *again = sbx_sandbox_resume(client, json, &err);
    double took = tu_now() - t0;
    cr_assert_not_null(again, "resume: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_lt(took, 4.0, "the resume of a stopped supervisor waited %.1f s for a ping", took);
    char *want = tu_strdup_printf("timed out waiting for the supervisor of sandbox %s",
                                  sbx_sandbox_get0_id(again));
    err = tu_exec_fail(again, &(sbx_exec_request){ .struct_size = sizeof(sbx_exec_request),
                                                  .shell = "echo hi" }, SBX_ERROR_TIMEOUT);
    tu_assert_error(err, SBX_ERROR_TIMEOUT, want, NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_sandbox_is_alive(again, &err), -1);
    tu_assert_error(err, SBX_ERROR_TIMEOUT, want, NULL);
    sbx_error_clear(&err);

    destroy_ends_it(again, sup, bg, meta);
    sbx_sandbox_free(again);
    sbx_sandbox_free(sb);
    sbx_client_free(client);
    free(want);
    free(meta);
    free(json);
}

/* ------------------------------------------- a stopped supervisor */

static int cmdline_has(pid_t pid, void *word)
{
    char buf[4096];
    ssize_t len = tu_cmdline(pid, buf, sizeof buf - 1);
    if (len <= 0)
        return 0;
    buf[len] = ' ';
    buf[len + 1] = '\0';
    return strstr(buf, word) != NULL;
}

/* How many processes have @word in their command line, each of its
 * arguments followed by a space (so "sleep 9 " is the whole argument 9;
 * host-wide: a bubblewrap sandbox's are host processes too). */
static int count_with_arg(const char *word)
{
    return (int)tu_pids_where(cmdline_has, (void *)word, NULL, SIZE_MAX);
}

/* The exec of a stopped supervisor's sandbox, on another thread. */
struct stopped_exec {
    sbx_sandbox *sb;
    const char *cwd;
    const char *script;
    double timeout;             /* 0: 1 s; < 0: none */
    sbx_result *result;
    sbx_error *error;
    double took;
};

static void *run_stopped_exec(void *arg)
{
    struct stopped_exec *x = arg;
    double t0 = tu_now();
    sbx_exec_request rq = { .struct_size = sizeof(sbx_exec_request), .shell = x->script,
                            .cwd = x->cwd, .timeout_secs = x->timeout != 0 ? x->timeout : 1 };
    x->result = sbx_sandbox_execute_command(x->sb, &rq, &x->error);
    x->took = tu_now() - t0;
    return NULL;
}

/*
 * @e is the timeout error of a command whose supervisor @sup of sandbox
 * @id, stopped, did not answer: "the supervisor of sandbox ID (pid N,
 * stopped) did not answer for S s: " and @tail, S the time it waited as
 * measured (0.1 s steps), at least the 2 s bound and at most 4 s.
 */
static void assert_stall(const sbx_error *e, const char *id, pid_t sup, const char *tail)
{
    cr_assert_not_null(e, "no error");
    cr_assert_eq(sbx_error_get_code(e), SBX_ERROR_TIMEOUT, "code %s: %s",
                 sbx_error_code_name(sbx_error_get_code(e)), sbx_error_get0_message(e));
    const char *msg = sbx_error_get0_message(e);
    char *head = tu_strdup_printf("the supervisor of sandbox %s (pid %d, stopped) did not "
                                  "answer for ", id, (int)sup);
    cr_assert(strncmp(msg, head, strlen(head)) == 0, "message: %s", msg);
    char *end = NULL;
    double secs = strtod(msg + strlen(head), &end);
    cr_assert(secs >= 2.0 && secs <= 4.0, "waited %g s: %s", secs, msg);
    cr_assert(strncmp(end, " s: ", 4) == 0, "message: %s", msg);
    cr_assert_str_eq(end + 4, tail);
    free(head);
}

/*
 * A command sent to a sandbox whose supervisor is stopped (SIGSTOP), with
 * a timeout of 1 s, on @backend in @mode; out of process @cwd NULL takes
 * the direct path (straight to the supervisor), "/tmp" the plugin host's:
 *
 * - the call returns within 5 s (its timeout and PROTO_ANSWER_SECS, 2 s)
 *   with a timeout error that names the sandbox and its stopped supervisor
 *   and says the command did not start and never will: outcome failed,
 *   context started=no;
 * - 2 s after SIGCONT the command has not run (no marker file, no process
 *   of it), the sandbox serves the next exec, and destroy leaves nothing;
 * - a supervisor continued after the timeout but within the grace reads
 *   the request late and refuses it: the command timed out (exit 124,
 *   timed_out, no output), as one that outlives its timeout does, and
 *   nothing ran;
 * - a supervisor stopped while the command runs (timeout 3 s): the call
 *   fails within 7 s saying the command may have started (outcome
 *   unknown, started=unknown), and within 5 s of SIGCONT nothing of the
 *   command is left.
 */
static void stopped_supervisor(const char *backend, sbx_plugin_mode mode, const char *cwd)
{
    setenv("SBX_TEST_BACKEND", backend, 1);
    sbx_error *err = NULL;
    sbx_client *client = sbx_client_new_with_mode(backend, mode, &err);
    cr_assert_not_null(client, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *sb = tu_create(client, NULL);
    const char *id = sbx_sandbox_get0_id(sb);
    char *json = session_state(sb);
    char *meta = state_str(json, "meta");
    pid_t sup = (pid_t)state_int(json, "supervisor_pid");
    /* Commands of their own (these tests run at once, and the processes
     * are looked for host-wide): sleeps of a length no other test uses. */
    char *never = tu_strdup_printf("sleep 1017.%d ", (int)getpid());
    char *longer = tu_strdup_printf("sleep 1018.%d ", (int)getpid());
    char *never_cmd = tu_strdup_printf("touch \"$TMPDIR/marker\"; exec %s", never);
    char *long_cmd = tu_strdup_printf("exec %s", longer);
    /* The path taken: the same command runs through it. */
    struct stopped_exec x = { .sb = sb, .cwd = cwd, .script = "echo ran" };
    run_stopped_exec(&x);
    cr_assert_not_null(x.result, "%s", x.error ? sbx_error_get0_message(x.error) : "");
    tu_assert_exit(x.result, 0);
    tu_assert_stdout(x.result, "ran\n");
    sbx_result_free(x.result);

    tu_stop_pid(sup);
    x = (struct stopped_exec){ .sb = sb, .cwd = cwd,
                               .script = never_cmd };
    run_stopped_exec(&x);
    cr_assert_null(x.result, "a result (exit %d) from a stopped supervisor",
                   sbx_result_get_exit_code(x.result));
    cr_assert_lt(x.took, 5.0, "the exec returned %.1f s after its start", x.took);
    cr_assert_gt(x.took, 0.9, "the exec returned %.2f s after its start", x.took);
    assert_stall(x.error, id, sup, "the command did not start and never will");
    cr_assert_eq(sbx_error_get_outcome(x.error), SBX_ERROR_OUTCOME_FAILED);
    cr_assert_str_eq(sbx_error_get0_context(x.error, "started"), "no");
    sbx_error_clear(&x.error);

    cr_assert_eq(kill(sup, SIGCONT), 0);
    usleep(2000000);
    expect_sh(sb, "test -e \"$TMPDIR/marker\" && echo ran || echo not-run", "not-run\n");
    cr_assert_eq(count_with_arg(never), 0, "the command runs after SIGCONT");

    /* Continued between the timeout and the grace's end: read late, refused. */
    tu_stop_pid(sup);
    x = (struct stopped_exec){ .sb = sb, .cwd = cwd,
                               .script = never_cmd };
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, run_stopped_exec, &x), 0);
    usleep(1500000);
    cr_assert_eq(kill(sup, SIGCONT), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    /* Timed out, as a command that outlives its timeout is everywhere. */
    cr_assert_not_null(x.result, "a request read late: %s",
                       x.error ? sbx_error_get0_message(x.error) : "");
    cr_assert_lt(x.took, 5.0, "the exec returned %.1f s after its start", x.took);
    cr_assert_eq(sbx_result_get_exit_code(x.result), 124);
    cr_assert_eq(sbx_result_is_timed_out(x.result), 1);
    tu_assert_stdout(x.result, "");
    tu_assert_stderr(x.result, "");
    sbx_result_free(x.result);
    usleep(500000);
    expect_sh(sb, "test -e \"$TMPDIR/marker\" && echo ran || echo not-run", "not-run\n");
    cr_assert_eq(count_with_arg(never), 0, "the command ran after all");

    /* No timeout of its own and the client's call timeout 1 s: the start
     * call's deadline bounds the start, on every path, and the error says
     * it was that deadline. */
    cr_assert_eq(sbx_client_set_call_timeout(client, 1.0, NULL), 0);
    tu_stop_pid(sup);
    x = (struct stopped_exec){ .sb = sb, .cwd = cwd, .script = never_cmd, .timeout = -1 };
    cr_assert_eq(pthread_create(&th, NULL, run_stopped_exec, &x), 0);
    usleep(1500000);
    cr_assert_eq(kill(sup, SIGCONT), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(sbx_client_set_call_timeout(client, 0, NULL), 0);
    cr_assert_null(x.result, "a result (exit %d) of a command read after the call's deadline",
                   sbx_result_get_exit_code(x.result));
    cr_assert_lt(x.took, 5.0, "the exec returned %.1f s after its start", x.took);
    cr_assert_eq(sbx_error_get_code(x.error), SBX_ERROR_TIMEOUT, "%s",
                 sbx_error_get0_message(x.error));
    char *want = tu_strdup_printf("the supervisor of sandbox %s took the command in only after "
                                  "the start call's deadline (the client's call timeout, 1 s): "
                                  "it did not start", id);
    cr_assert_str_eq(sbx_error_get0_message(x.error), want);
    free(want);
    cr_assert_str_eq(sbx_error_get0_context(x.error, "started"), "no");
    sbx_error_clear(&x.error);
    usleep(500000);
    expect_sh(sb, "test -e \"$TMPDIR/marker\" && echo ran || echo not-run", "not-run\n");
    cr_assert_eq(count_with_arg(never), 0, "the command ran after all");

    /* Stopped while the command runs: it may have started, and it ends
     * once the supervisor runs again. */
    x = (struct stopped_exec){ .sb = sb, .cwd = cwd, .script = long_cmd,
                               .timeout = 3 };
    cr_assert_eq(pthread_create(&th, NULL, run_stopped_exec, &x), 0);
    double end = tu_now() + 2.5;
    while (count_with_arg(longer) == 0 && tu_now() < end)
        usleep(10000);
    cr_assert_eq(count_with_arg(longer), 1, "the command did not start within 2.5 s");
    tu_stop_pid(sup);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_null(x.result, "a result (exit %d) from a stopped supervisor",
                   sbx_result_get_exit_code(x.result));
    cr_assert_lt(x.took, 7.0, "the exec returned %.1f s after its start", x.took);
    assert_stall(x.error, id, sup, "the command may have started; it is ended once the "
                 "supervisor runs again");
    cr_assert_eq(sbx_error_get_outcome(x.error), SBX_ERROR_OUTCOME_UNKNOWN);
    cr_assert_str_eq(sbx_error_get0_context(x.error, "started"), "unknown");
    /* Its rendering says so, after the code. */
    char *text = sbx_error_to_string(x.error), *rendered = tu_expected_error_string(x.error);
    cr_assert_str_eq(text, rendered);
    char *head = tu_strdup_printf("%s [code=timeout, retryable, outcome=unknown; backend=%s; "
                                  "op=exec_wait; started=unknown; ",
                                  sbx_error_get0_message(x.error),
                                  sbx_error_get0_backend(x.error));
    cr_assert_eq(strncmp(text, head, strlen(head)), 0, "\"%s\" does not start with \"%s\"",
                 text, head);
    free(head);
    free(rendered);
    free(text);
    sbx_error_clear(&x.error);
    cr_assert_eq(count_with_arg(longer), 1, "the command ended with its supervisor stopped");
    cr_assert_eq(kill(sup, SIGCONT), 0);
    end = tu_now() + 5.0;
    while (count_with_arg(longer) > 0 && tu_now() < end)
        usleep(20000);
    cr_assert_eq(count_with_arg(longer), 0, "the command outlived SIGCONT by 5 s");
    expect_sh(sb, "echo still", "still\n");

    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert(tu_wait_pid_gone(sup, 5.0), "the supervisor survived: %s", tu_proc_describe(sup));
    cr_assert(!tu_exists(meta), "destroy left %s", meta);
    sbx_sandbox_free(sb);
    sbx_client_free(client);
    cr_assert_eq(tu_wait_spares_gone(g_tmp, 5.0), 0);
    cr_assert_eq(tu_count_entries(g_tmp), 0, "%d entries left in %s",
                 tu_count_entries(g_tmp), g_tmp);
    free(long_cmd);
    free(never_cmd);
    free(longer);
    free(never);
    free(meta);
    free(json);
}

Test(supervisor, local_stopped_supervisor_direct_exec_times_out_and_never_runs)
{
    stopped_supervisor("local", SBX_PLUGIN_MODE_OUT_OF_PROCESS, NULL);
}

Test(supervisor, local_stopped_supervisor_host_exec_times_out_and_never_runs)
{
    stopped_supervisor("local", SBX_PLUGIN_MODE_OUT_OF_PROCESS, "/tmp");
}

Test(supervisor, local_stopped_supervisor_in_process_exec_times_out_and_never_runs)
{
    stopped_supervisor("local", SBX_PLUGIN_MODE_IN_PROCESS, NULL);
}

#ifdef SBX_TEST_BUBBLEWRAP
Test(supervisor, bubblewrap_stopped_supervisor_direct_exec_times_out_and_never_runs)
{
    stopped_supervisor("bubblewrap", SBX_PLUGIN_MODE_OUT_OF_PROCESS, NULL);
}

Test(supervisor, bubblewrap_stopped_supervisor_host_exec_times_out_and_never_runs)
{
    stopped_supervisor("bubblewrap", SBX_PLUGIN_MODE_OUT_OF_PROCESS, "/tmp");
}

Test(supervisor, bubblewrap_stopped_supervisor_in_process_exec_times_out_and_never_runs)
{
    stopped_supervisor("bubblewrap", SBX_PLUGIN_MODE_IN_PROCESS, NULL);
}
#endif

/*
 * A timeout shorter than the command's start (10 us: the supervisor reads
 * the request after it): the command timed out, exit 124 with timed_out
 * set and no output, as a command that outlives its timeout does; never an
 * error. On @backend in process, and out of process straight to the
 * supervisor and through the plugin host (a cwd), 20 times each.
 */
static void tiny_timeout_times_out(const char *backend)
{
    static const struct {
        sbx_plugin_mode mode;
        const char *cwd;
    } paths[] = { { SBX_PLUGIN_MODE_IN_PROCESS, NULL },
                  { SBX_PLUGIN_MODE_OUT_OF_PROCESS, NULL },
                  { SBX_PLUGIN_MODE_OUT_OF_PROCESS, "/tmp" } };
    setenv("SBX_TEST_BACKEND", backend, 1);
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        sbx_error *err = NULL;
        sbx_client *client = sbx_client_new_with_mode(backend, paths[i].mode, &err);
        cr_assert_not_null(client, "%s", err ? sbx_error_get0_message(err) : "");
        sbx_sandbox *sb = tu_create(client, NULL);
        for (int n = 0; n < 20; n++) {
            sbx_exec_request rq = { .struct_size = sizeof(sbx_exec_request),
                                    .shell = "echo hi", .cwd = paths[i].cwd,
                                    .timeout_secs = 1e-5 };
            sbx_result *r = sbx_sandbox_execute_command(sb, &rq, &err);
            cr_assert_not_null(r, "path %zu, run %d: %s", i, n,
                               err ? sbx_error_get0_message(err) : "");
            cr_assert_eq(sbx_result_get_exit_code(r), 124, "path %zu, run %d", i, n);
            cr_assert_eq(sbx_result_is_timed_out(r), 1, "path %zu, run %d", i, n);
            sbx_result_free(r);
        }
        expect_sh(sb, "echo still", "still\n");
        cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "destroy: %s",
                     err ? sbx_error_get0_message(err) : "");
        sbx_sandbox_free(sb);
        sbx_client_free(client);
    }
}

Test(supervisor, local_a_timeout_shorter_than_the_start_times_out)
{
    tiny_timeout_times_out("local");
}

#ifdef SBX_TEST_BUBBLEWRAP
Test(supervisor, bubblewrap_a_timeout_shorter_than_the_start_times_out)
{
    tiny_timeout_times_out("bubblewrap");
}
#endif

#ifdef SBX_TEST_BUBBLEWRAP
Test(supervisor, bubblewrap_impostor_listener_gets_nothing_and_destroy_ends_the_sandbox)
{
    impostor_is_refused("bubblewrap");
}

Test(supervisor, bubblewrap_sandbox_cannot_reach_or_take_the_supervisor_socket)
{
    sbx_client *client = client_of("bubblewrap");
    sbx_sandbox *sb = tu_create(client, NULL);
    char *json = session_state(sb);
    char *meta = state_str(json, "meta");
    char *sock = tu_strdup_printf("%s/sock", meta);
    struct stat before, after;
    cr_assert_eq(stat(sock, &before), 0, "%s: %s", sock, strerror(errno));
    cr_assert(S_ISSOCK(before.st_mode));
    cr_assert_eq(before.st_mode & 07777, 0600);

    /* Nothing of the socket's directory is in view; no socket to rename
     * and listen in place of; the supervisor's descriptors are out of
     * reach (/proc/1/fd, pidfd_getfd). */
    expect_sh(sb,
              "ls -A /.sbx; "
              "mv /.sbx/run/sock /.sbx/run/sock.x 2>/dev/null || echo no-rename; "
              "ls /proc/1/fd >/dev/null 2>&1 || echo no-fds; "
              "/usr/bin/python3 -c '\n"
              "import ctypes, socket, os\n"
              "libc = ctypes.CDLL(None, use_errno=True)\n"
              "pfd = libc.syscall(434, 1, 0)\n"
              "taken = [fd for fd in range(64) if pfd >= 0 and libc.syscall(438, pfd, fd, 0) >= 0]\n"
              "print(\"taken\" if taken else \"none taken\")\n"
              "os.makedirs(\"/.sbx/run\")\n"
              "s = socket.socket(socket.AF_UNIX)\n"
              "s.bind(\"/.sbx/run/sock\"); s.listen(1); print(\"listening in its own tree\")\n"
              "'",
              "sbx-supervisor\nno-rename\nno-fds\nnone taken\nlistening in its own tree\n");
    /* The host's socket is the same file, and the supervisor answers. */
    cr_assert_eq(stat(sock, &after), 0);
    cr_assert_eq(after.st_ino, before.st_ino);
    char *run = tu_strdup_printf("%s/run", meta);
    cr_assert(!tu_exists(run), "%s exists", run);
    expect_sh(sb, "echo still", "still\n");
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    cr_assert(!tu_exists(meta));
    sbx_sandbox_free(sb);
    sbx_client_free(client);
    free(run);
    free(sock);
    free(meta);
    free(json);
}
#endif

/* Random frames on a local sandbox's socket (a fixed seed, so a failure
 * repeats): the supervisor survives every one and still serves exec. Run
 * under the sanitizers this is the supervisor protocol's fuzzing. */
/* Appends a protocol string (u32 length, the bytes, a NUL) to @b at *@n. */
static void put_str(unsigned char *b, size_t *n, const char *s)
{
    uint32_t l = (uint32_t)strlen(s);
    memcpy(b + *n, &l, 4);
    memcpy(b + *n + 4, s, l + 1);
    *n += 4 + l + 1;
}

/* Sends @type (EXEC or EXEC_QUIET) for `/bin/sh -c 'exit 7'` in @cwd on a
 * new connection to @sock, /dev/null as its three streams and, when
 * @exit_fd >= 0, that as a fourth descriptor (the exit socket); returns the
 * connection. */
static int send_exit7_fds(const char *sock, uint32_t type, const char *cwd, int exit_fd)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(c >= 0);
    cr_assert_eq(connect(c, (struct sockaddr *)&sa, sizeof sa), 0, "%s", strerror(errno));
    unsigned char buf[1024];
    size_t n = 8;
    uint32_t argc = 3, envc = 0;
    memcpy(buf + n, &argc, 4);
    n += 4;
    put_str(buf, &n, "/bin/sh");
    put_str(buf, &n, "-c");
    put_str(buf, &n, "exit 7");
    memcpy(buf + n, &envc, 4);
    n += 4;
    put_str(buf, &n, cwd);
    uint32_t len = (uint32_t)(n - 8);
    memcpy(buf, &type, 4);
    memcpy(buf + 4, &len, 4);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    cr_assert(devnull >= 0);
    int fds[4] = { devnull, devnull, devnull, exit_fd };
    size_t nfds = exit_fd >= 0 ? 4 : 3;
    union {
        struct cmsghdr align;
        char b[CMSG_SPACE(sizeof fds)];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = { buf, n };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                         .msg_controllen = CMSG_SPACE(sizeof(int) * nfds) };
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
    cr_assert_eq(sendmsg(c, &mh, MSG_NOSIGNAL), (ssize_t)n);
    close(devnull);
    return c;
}

static int send_exit7(const char *sock, uint32_t type, const char *cwd)
{
    return send_exit7_fds(sock, type, cwd, -1);
}

/* Reads one frame of a 4-byte payload from @c into *@type, *@value. */
static void get_i32_frame(int c, uint32_t *type, int32_t *value)
{
    uint32_t f[3];
    size_t got = 0;
    while (got < sizeof f) {
        ssize_t r = read(c, (char *)f + got, sizeof f - got);
        cr_assert(r > 0, "connection ended after %zu bytes", got);
        got += (size_t)r;
    }
    cr_assert_eq(f[1], 4u, "payload of %u bytes", f[1]);
    *type = f[0];
    *value = (int32_t)f[2];
}

/*
 * EXEC is answered by STARTED (the pid) then EXIT; EXEC_QUIET, for a
 * caller that waits for the end only, by EXIT alone: its first frame is
 * EXIT with the command's code, and the connection ends after it.
 */
Test(supervisor, exec_quiet_answers_exit_without_started)
{
    sbx_client *client = client_of("local");
    sbx_sandbox *sb = tu_create(client, NULL);
    char *json = session_state(sb);
    char *meta = state_str(json, "meta");
    char *sock = tu_strdup_printf("%s/sock", meta);
    const char *root = sbx_sandbox_get0_root(sb);
    cr_assert_not_null(root);
    uint32_t type;
    int32_t value;

    int c = send_exit7(sock, F_EXEC, root);
    get_i32_frame(c, &type, &value);
    cr_assert_eq(type, (uint32_t)F_STARTED, "EXEC: first frame type %u", type);
    cr_assert_gt(value, 1, "pid %d", value);
    get_i32_frame(c, &type, &value);
    cr_assert_eq(type, (uint32_t)F_EXIT, "EXEC: second frame type %u", type);
    cr_assert_eq(value, 7);
    close(c);

    c = send_exit7(sock, F_EXEC_QUIET, root);
    get_i32_frame(c, &type, &value);
    cr_assert_eq(type, (uint32_t)F_EXIT, "EXEC_QUIET: first frame type %u", type);
    cr_assert_eq(value, 7);
    close(c);

    /* The library's exec on it still runs (the supervisor serves on). */
    expect_sh(sb, "echo ok", "ok\n");
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(client);
    free(sock);
    free(meta);
    free(json);
}

/* Reads @fd to EOF (bounded by 10 s) into @buf; returns the bytes read. */
static size_t read_to_eof(int fd, unsigned char *buf, size_t cap)
{
    size_t got = 0;
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        cr_assert_eq(poll(&p, 1, 10000), 1, "no EOF within 10 s (%zu bytes so far)", got);
        ssize_t r = read(fd, buf + got, cap - got);
        cr_assert(r >= 0, "read: %s", strerror(errno));
        if (r == 0)
            return got;
        got += (size_t)r;
        cr_assert(got < cap, "more than %zu bytes", cap);
    }
}

/*
 * EXEC_QUIET with a fourth descriptor, the caller's exit socket
 * (SBX_PLUGIN_EXEC_EXIT_FD): the end comes there as one 8-byte record
 * {"SBXX", code} and the socket closes, and EXIT still comes on the
 * connection. An exec that cannot start closes it without a record (the
 * ERROR comes on the connection). Through the library, execs whose end
 * came that way leave their background processes running.
 */
Test(supervisor, exec_quiet_reports_the_end_on_the_exit_socket)
{
    sbx_client *client = client_of("local");
    sbx_sandbox *sb = tu_create(client, NULL);
    char *json = session_state(sb);
    char *meta = state_str(json, "meta");
    char *sock = tu_strdup_printf("%s/sock", meta);
    const char *root = sbx_sandbox_get0_root(sb);
    cr_assert_not_null(root);
    uint32_t type;
    int32_t value;
    unsigned char got[64];
    int sv[2];

    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int c = send_exit7_fds(sock, F_EXEC_QUIET, root, sv[1]);
    close(sv[1]);
    cr_assert_eq(read_to_eof(sv[0], got, sizeof got), 8u);
    uint32_t magic;
    int32_t code;
    memcpy(&magic, got, 4);
    memcpy(&code, got + 4, 4);
    cr_assert_eq(magic, 0x58584253u, "record magic %#x", magic);
    cr_assert_eq(magic, SBX_PLUGIN_EXIT_RECORD_MAGIC);
    cr_assert_eq(code, 7);
    close(sv[0]);
    get_i32_frame(c, &type, &value);
    cr_assert_eq(type, (uint32_t)F_EXIT, "first frame type %u", type);
    cr_assert_eq(value, 7);
    close(c);

    /* A working directory that does not exist: nothing runs, no record. */
    char *gone = tu_strdup_printf("%s/no-such-dir", root);
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    c = send_exit7_fds(sock, F_EXEC_QUIET, gone, sv[1]);
    close(sv[1]);
    cr_assert_eq(read_to_eof(sv[0], got, sizeof got), 0u, "a record for an exec that never ran");
    close(sv[0]);
    uint32_t hdr[2];
    cr_assert_eq(read(c, hdr, sizeof hdr), (ssize_t)sizeof hdr);
    cr_assert_eq(hdr[0], 4u, "frame type %u is not ERROR", hdr[0]);
    close(c);
    free(gone);

    /* Twenty execs that each leave a background sleep: all still run after
     * one more exec (the supervisor saw each connection close by then). */
    pid_t bg[20];
    for (int i = 0; i < 20; i++) {
        sbx_result *r = tu_sh(sb, "sleep 1000 >/dev/null 2>&1 </dev/null & echo $!", 10);
        tu_assert_exit(r, 0);
        bg[i] = (pid_t)strtol(sbx_result_get0_stdout(r, NULL), NULL, 10);
        cr_assert_gt(bg[i], 1);
        sbx_result_free(r);
    }
    expect_sh(sb, "echo ok", "ok\n");
    for (int i = 0; i < 20; i++)
        cr_assert_eq(tu_pid_gone(bg[i]), 0, "background sleep %d of exec %d was killed",
                     (int)bg[i], i);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    for (int i = 0; i < 20; i++)
        cr_assert(tu_wait_pid_gone(bg[i], 5.0), "background sleep %d outlived destroy",
                  (int)bg[i]);
    sbx_sandbox_free(sb);
    sbx_client_free(client);
    free(sock);
    free(meta);
    free(json);
}

Test(supervisor, random_frames_leave_the_supervisor_serving)
{
    sbx_client *client = client_of("local");
    sbx_sandbox *sb = tu_create(client, NULL);
    char *json = session_state(sb);
    char *meta = state_str(json, "meta");
    pid_t sup = (pid_t)state_int(json, "supervisor_pid");
    char *sock = tu_strdup_printf("%s/sock", meta);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    unsigned seed = 1303;
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    cr_assert(devnull >= 0);
    for (int i = 0; i < 600; i++) {
        int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert(c >= 0);
        cr_assert_eq(connect(c, (struct sockaddr *)&sa, sizeof sa), 0, "frame %d: %s", i,
                     strerror(errno));
        unsigned char buf[4096 + 8];
        uint32_t type = (uint32_t)(rand_r(&seed) % 16);
        if (type == F_DESTROY)
            type = F_PING;  /* the one request that ends it on purpose */
        uint32_t len = (uint32_t)(rand_r(&seed) % 4096);
        /* Sometimes a length that lies about the payload. */
        uint32_t said = rand_r(&seed) % 8 == 0 ? (uint32_t)rand_r(&seed) : len;
        memcpy(buf, &type, 4);
        memcpy(buf + 4, &said, 4);
        for (uint32_t k = 0; k < len; k++)
            buf[8 + k] = (unsigned char)rand_r(&seed);
        /* Strings and counts that are almost right. */
        if (len >= 8 && rand_r(&seed) % 2) {
            uint32_t small = (uint32_t)(rand_r(&seed) % 4);
            memcpy(buf + 8, &small, 4);
        }
        struct iovec iov = { buf, 8 + len };
        union {
            struct cmsghdr align;
            char b[CMSG_SPACE(sizeof(int) * 3)];
        } ctl;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (type == F_EXEC && rand_r(&seed) % 2) {
            int fds[3] = { devnull, devnull, devnull };
            memset(&ctl, 0, sizeof ctl);
            mh.msg_control = ctl.b;
            mh.msg_controllen = sizeof ctl.b;
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof fds);
            memcpy(CMSG_DATA(cm), fds, sizeof fds);
        }
        (void)sendmsg(c, &mh, MSG_NOSIGNAL);
        /* Take what it answers, briefly, then hang up. */
        struct pollfd p = { .fd = c, .events = POLLIN };
        if (poll(&p, 1, 5) > 0)
            (void)read(c, buf, sizeof buf);
        close(c);
        if (i % 100 == 99)
            cr_assert_eq(tu_pid_gone(sup), 0, "the supervisor died after frame %d", i);
    }
    close(devnull);
    cr_assert_eq(tu_pid_gone(sup), 0, "the supervisor died");
    expect_sh(sb, "echo still serving", "still serving\n");
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    cr_assert(!tu_exists(meta));
    sbx_sandbox_free(sb);
    sbx_client_free(client);
    free(sock);
    free(meta);
    free(json);
}

/* ------------------------------------------------------- planted states */

/* A tree that must stay as it is: VICTIM/tmp/keep and VICTIM/keep. */
static char *make_victim(void)
{
    char *victim = tu_strdup_printf("%s/victim", g_tmp);
    char *tmp = tu_strdup_printf("%s/tmp", victim);
    cr_assert_eq(mkdir(victim, 0755), 0);
    cr_assert_eq(mkdir(tmp, 0755), 0);
    char *f = tu_strdup_printf("%s/keep", tmp);
    tu_write_file(f, "precious\n", 9, 0644);
    free(f);
    f = tu_strdup_printf("%s/keep", victim);
    tu_write_file(f, "precious\n", 9, 0644);
    free(f);
    free(tmp);
    return victim;
}

static void assert_victim_intact(const char *victim)
{
    char *a = tu_strdup_printf("%s/tmp/keep", victim), *b = tu_strdup_printf("%s/keep", victim);
    cr_assert_eq(file_size(a), 9, "%s was removed", a);
    cr_assert_eq(file_size(b), 9, "%s was removed", b);
    free(a);
    free(b);
}

static void expect_resume_error(sbx_client *client, const char *json, sbx_error_code code,
                                const char *needle)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_resume(client, json, &err);
    cr_assert_null(sb, "resume of %s succeeded", json);
    tu_assert_error(err, code, needle, NULL);
    sbx_error_free(err);
}

Test(supervisor, session_state_root_and_made_tmp_never_choose_what_destroy_removes)
{
    sbx_client *client = client_of("local");
    char *victim = make_victim();
    sbx_sandbox *sb = tu_create(client, NULL);
    char *json = session_state(sb);
    char *meta = state_str(json, "meta");

    /* The real sandbox's state with a chosen root and flags. */
    char *v = tu_strdup_printf("\"%s\"", victim);
    char *s1 = state_with(json, "root", v);
    char *s2 = state_with(s1, "owns_root", "false");
    char *s3 = state_with(s2, "made_tmp", "true");
    char *want = tu_strdup_printf("\"root\" is \"%s\", but sandbox %s was made with root \"%s\"",
                                  victim, sbx_sandbox_get0_id(sb), sbx_sandbox_get0_root(sb));
    expect_resume_error(client, s1, SBX_ERROR_INVALID_ARGUMENT, want);   /* no "\/" */
    free(want);
    expect_resume_error(client, s3, SBX_ERROR_INVALID_ARGUMENT,
                        "but sandbox");
    assert_victim_intact(victim);
    expect_sh(sb, "echo alive", "alive\n");

    /* A planted directory: another user's (as root), or open to others,
     * with a record naming the victim and a live process. */
    pid_t live = fork();
    cr_assert(live >= 0);
    if (live == 0) {
        pause();
        _exit(0);
    }
    char *stat_path = tu_strdup_printf("/proc/%d/stat", (int)live);
    FILE *f = fopen(stat_path, "r");
    cr_assert_not_null(f);
    char line[1024];
    cr_assert_not_null(fgets(line, sizeof line, f));
    fclose(f);
    unsigned long long start = 0;
    char *p = strrchr(line, ')');
    cr_assert_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                        "%*d %*d %*d %*d %llu", &start), 1);
    char *planted = tu_strdup_printf("%s/sbx-local-planted", g_tmp);
    cr_assert_eq(mkdir(planted, 0700), 0);
    char *rec = tu_strdup_printf("%s/record", planted);
    char *text = tu_strdup_printf("{\"supervisor_pid\":%d,\"supervisor_start\":%llu,"
                                  "\"supervisor_uid\":%u,\"root\":\"%s\",\"owns_root\":false,"
                                  "\"made_tmp\":true}\n", (int)live, start,
                                  (unsigned)geteuid(), victim);
    tu_write_file(rec, text, strlen(text), 0666);
    cr_assert_eq(chmod(rec, 0666), 0);
    char *pm = tu_strdup_printf("\"%s\"", planted);
    char *s4 = state_with(s3, "meta", pm);
    char *pid_s = tu_strdup_printf("%d", (int)live), *start_s = tu_strdup_printf("%llu", start);
    char *s5 = state_with(s4, "supervisor_pid", pid_s);
    char *s6 = state_with(s5, "supervisor_start", start_s);
    /* Others may write the record. */
    expect_resume_error(client, s6, SBX_ERROR_INVALID_ARGUMENT, "refusing record");
    /* Others may write the directory. */
    cr_assert_eq(chmod(rec, 0600), 0);
    cr_assert_eq(chmod(planted, 0777), 0);
    expect_resume_error(client, s6, SBX_ERROR_INVALID_ARGUMENT,
                        "group or others may write it");
    if (geteuid() == 0) {
        /* root and a directory of nobody's. */
        cr_assert_eq(chmod(planted, 0700), 0);
        cr_assert_eq(chown(planted, 65534, 65534), 0);
        cr_assert_eq(chown(rec, 65534, 65534), 0);
        expect_resume_error(client, s6, SBX_ERROR_INVALID_ARGUMENT, "owned by another user");
    }
    /* Its "supervisor" dead: still refused, nothing removed. */
    kill(live, SIGKILL);
    int status;
    cr_assert_eq(waitpid(live, &status, 0), live);
    expect_resume_error(client, s6, SBX_ERROR_INVALID_ARGUMENT, "refusing sandbox directory");
    assert_victim_intact(victim);
    cr_assert_eq(file_size(rec), (long long)strlen(text), "the planted record was touched");

    /* The real state still works and destroys only what it made. */
    sbx_sandbox *again = sbx_sandbox_resume(client, json, NULL);
    cr_assert_not_null(again);
    cr_assert_eq(sbx_sandbox_destroy(again, NULL), 0);
    cr_assert(!tu_exists(meta));
    assert_victim_intact(victim);
    sbx_sandbox_free(again);
    sbx_sandbox_free(sb);
    sbx_client_free(client);
    free(s6); free(s5); free(s4); free(s3); free(s2); free(s1);
    free(pid_s); free(start_s); free(pm); free(text); free(rec); free(planted);
    free(stat_path); free(v); free(meta); free(json); free(victim);
}

/* ------------------------------------------------- a killed supervisor */

/* An exec in flight on another thread: its outcome. */
struct in_flight {
    sbx_sandbox *sb;
    sbx_result *result;
    sbx_error *error;
};

static void *run_in_flight(void *arg)
{
    struct in_flight *f = arg;
    f->result = sbx_sandbox_execute_shell(f->sb, "echo $$ > \"$TMPDIR/fg.pid\"; exec sleep 1004",
                                          &f->error);
    return NULL;
}

static void killed_supervisor_leaves_nothing(const char *backend)
{
    setenv("SBX_TEST_BACKEND", backend, 1);     /* for tu_host_pid */
    sbx_client *client = client_of(backend);
    sbx_sandbox *sb = tu_create(client, NULL);
    /* A setsid'd sleep, a double-forked one, and a plain background one. */
    expect_sh(sb,
              "setsid sleep 1001 >/dev/null 2>&1 </dev/null & echo $! > \"$TMPDIR/pids\"; "
              "sh -c 'setsid sleep 1002 >/dev/null 2>&1 </dev/null & "
              "echo $! >> \"$TMPDIR/pids\"' & "
              "wait $!; sleep 1003 >/dev/null 2>&1 </dev/null & echo $! >> \"$TMPDIR/pids\"",
              "");
    pid_t pids[8];
    size_t n = tu_read_pids(sb, "$TMPDIR/pids", pids, 3);
    cr_assert_eq(n, 3);
    for (size_t i = 0; i < n; i++) {
        pids[i] = tu_host_pid(sb, pids[i]);
        cr_assert_eq(tu_pid_gone(pids[i]), 0);
    }
    /* An exec in flight. */
    struct in_flight fl = { .sb = sb };
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, run_in_flight, &fl), 0);
    double end = tu_now() + 10;
    sbx_result *r = NULL;
    do {
        sbx_result_free(r);
        usleep(20000);
        r = tu_sh(sb, "cat \"$TMPDIR/fg.pid\" 2>/dev/null", 10);
    } while (sbx_result_get0_stdout(r, NULL)[0] == '\0' && tu_now() < end);
    sbx_result_free(r);
    cr_assert_eq(tu_read_pids(sb, "$TMPDIR/fg.pid", &pids[n], 1), 1);
    pids[n] = tu_host_pid(sb, pids[n]);
    n++;

    char *json = session_state(sb);
    char *meta = state_str(json, "meta");
    pid_t sup = (pid_t)state_int(json, "supervisor_pid");
    n += children_of(sup, &pids[n], 7 - n);
    cr_assert(n >= 5, "only %zu processes found (no reaper below %d?)", n, (int)sup);
    pids[n++] = sup;

    double t0 = tu_now();
    cr_assert_eq(kill(sup, SIGKILL), 0);
    for (size_t i = 0; i < n; i++)
        cr_assert(tu_wait_pid_gone(pids[i], 5.0 - (tu_now() - t0)),
                  "5 s after kill -9 of the supervisor %d: %s", (int)sup,
                  tu_proc_describe(pids[i]));
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(kill(pids[i], 0) < 0 && errno == ESRCH ? 1 : tu_pid_gone(pids[i]), 1);
    /* The exec in flight learns its sandbox ended. */
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_null(fl.result, "the exec in flight has a result");
    tu_assert_error(fl.error, SBX_ERROR_NOT_FOUND, "ended while the command ran", NULL);
    sbx_error_free(fl.error);

    /* Its keeper removes its directory; resume (what `sbx rm` does) then
     * says not_found. */
    while (tu_exists(meta) && tu_now() - t0 < 5.0)
        usleep(20000);
    cr_assert(!tu_exists(meta), "%s is left 5 s after kill -9 of the supervisor", meta);
    expect_resume_error(client, json, SBX_ERROR_NOT_FOUND, "no longer exists");
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(client);
    cr_assert_eq(tu_count_entries(g_tmp), 0, "%d entries left in %s",
                 tu_count_entries(g_tmp), g_tmp);
    free(meta);
    free(json);
}

Test(supervisor, local_kill_9_of_the_supervisor_ends_every_process)
{
    killed_supervisor_leaves_nothing("local");
}

#ifdef SBX_TEST_BUBBLEWRAP
Test(supervisor, bubblewrap_kill_9_of_the_supervisor_ends_every_process)
{
    killed_supervisor_leaves_nothing("bubblewrap");
}
#define N_TESTS "43"
#define BWRAP_PLUGIN " plugins/local/.libs/libsbx-bubblewrap.so"
#else
#define N_TESTS "34"
#define BWRAP_PLUGIN ""
#endif

/* Runs `$SBX_CLI ARGS` with TMPDIR and SBX_STATE_DIR in the test's
 * directory; its stdout and stderr (joined) into @out; its exit status. */
static int run_cli(const char *args, char *out, size_t size)
{
    const char *cli = getenv("SBX_CLI");
    cr_assert(cli && *cli, "SBX_CLI is not set (run under make check)");
    char *cmd = tu_strdup_printf("TMPDIR='%s' SBX_STATE_DIR='%s/state' '%s' %s 2>&1", g_tmp,
                                 g_tmp, cli, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    free(cmd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

Test(supervisor, sbx_rm_after_kill_9_of_the_supervisor_removes_the_directory)
{
    char out[4096], id[256];
    cr_assert_eq(run_cli("create --backend local", out, sizeof out), 0, "%s", out);
    cr_assert_eq(sscanf(out, "%255s", id), 1);
    char *meta = tu_strdup_printf("%s/%s", g_tmp, id);
    cr_assert(tu_exists(meta), "%s missing", meta);
    char *args = tu_strdup_printf("exec %s -- sh -c 'setsid sleep 1005 >/dev/null 2>&1 "
                                  "</dev/null & echo $!'", id);
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    pid_t bg = (pid_t)strtol(out, NULL, 10);
    cr_assert(bg > 1 && !tu_pid_gone(bg), "no background sleep: %s", out);
    char *rec = tu_strdup_printf("%s/record", meta);
    json_object *doc = json_object_from_file(rec), *v;
    cr_assert(doc && json_object_object_get_ex(doc, "supervisor_pid", &v), "%s", rec);
    pid_t sup = (pid_t)json_object_get_int(v);
    json_object_put(doc);

    cr_assert_eq(kill(sup, SIGKILL), 0);
    cr_assert(tu_wait_pid_gone(bg, 5.0), "5 s after kill -9 of the supervisor: %s",
              tu_proc_describe(bg));
    free(args);
    args = tu_strdup_printf("rm %s", id);
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    char *want = tu_strdup_printf("sbx: sandbox %s no longer exists; forgot it\n", id);
    cr_assert(strstr(out, want) != NULL, "%s", out);
    cr_assert(!tu_exists(meta), "sbx rm left %s", meta);
    free(want);
    free(args);
    free(rec);
    free(meta);
}

/* ------------------------------------------------- warm supervisors */

/* The supervisor processes of warm supervisors started by this process (it
 * is their subreaper: the process the library spawns exits at once), and
 * of the sandboxes that claimed them: a settled keeper (settled_keeper()),
 * the child of this process, and its child, the supervisor. @want: a string their command lines hold
 * ("--warm", or a sandbox's directory). Stores keepers and supervisors in
 * @pids (at most @max); returns how many. */
/* Whether @pid runs the supervisor program with a command line holding
 * @want. */
static bool supervisor_of(pid_t pid, const char *want)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (k <= 0)
        return false;
    for (ssize_t i = 0; i < k; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    buf[k] = '\0';
    return strstr(buf, "sbx-supervisor --control-fd=3 ") && strstr(buf, want);
}

/* Whether @pid is a keeper settled under this process: a supervisor
 * program, a child of this process, that holds no control socket (fd 3).
 * The process the library spawned also runs the program as a child of
 * this process, with fd 3, until it exits just after its fork; until then
 * it and the keeper-to-be would look like a keeper and its supervisor. */
static bool settled_keeper(pid_t pid, const char *want)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/3", (int)pid);
    return pid > 1 && tu_ppid(pid) == getpid() && supervisor_of(pid, want)
           && access(path, F_OK) != 0 && errno == ENOENT;
}

static size_t warm_family(const char *want, pid_t *pids, size_t max)
{
    size_t n = 0;
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 1 || tu_pid_gone(pid))
            continue;
        if (settled_keeper(pid, want)
            || (supervisor_of(pid, want) && settled_keeper(tu_ppid(pid), want)))
            pids[n++] = pid;
    }
    closedir(d);
    return n;
}

/* Waits up to @secs until warm_family(@want) counts @count; returns the
 * last count. */
static size_t wait_warm_family(const char *want, size_t count, double secs, pid_t *pids,
                               size_t max)
{
    size_t n = 0;
    for (int i = 0; i <= (int)(secs * 100); i++) {
        n = warm_family(want, pids, max);
        if (n == count)
            break;
        usleep(10000);
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
    }
    return n;
}

static sbx_sandbox *create_in(sbx_client *c)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
    cr_assert_not_null(sb, "create: %s", err ? sbx_error_get0_message(err) : "");
    return sb;
}

static void destroy_free(sbx_sandbox *sb)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(sb);
}

/* 1 when @pid is one of the @n pids in @set. */
static int pid_in(pid_t pid, const pid_t *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == pid)
            return 1;
    return 0;
}

/* The warm supervisors are made ahead: the client holds one (keeper and
 * supervisor) and its spawner keeps one more ready, so four processes say
 * --warm once the first fill is done. The next create claims the client's:
 * two of those four then serve the sandbox and name its directory; the
 * next fill takes the spawner's ready one and the spawner makes another, so
 * four say --warm again. Freeing the client ends all of them and leaves no
 * directory, before it returns. */
Test(warm, the_next_create_claims_the_warm_supervisor_and_names_its_sandbox)
{
    cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    pid_t pids[16];
    sbx_client *c = client_of("local");
    sbx_sandbox *first = create_in(c);
    /* Started after the first create: the client's and the ready one. */
    cr_assert_eq(wait_warm_family("--warm", 4, 5.0, pids, 16), 4);
    pid_t warm[4] = { pids[0], pids[1], pids[2], pids[3] };

    sbx_sandbox *second = create_in(c);
    char *dir = tu_strdup_printf("--sandbox-dir=%s/%s", g_tmp, sbx_sandbox_get0_id(second));
    /* Two of those processes now serve the second sandbox and say so. */
    cr_assert_eq(wait_warm_family(dir, 2, 5.0, pids, 16), 2, "%s", dir);
    pid_t claimed[2] = { pids[0], pids[1] };
    cr_assert(pid_in(claimed[0], warm, 4) && pid_in(claimed[1], warm, 4),
              "%d %d serve %s, not two of the warm %d %d %d %d", (int)claimed[0],
              (int)claimed[1], dir, (int)warm[0], (int)warm[1], (int)warm[2], (int)warm[3]);
    /* And the next ones are made: the ready one handed over, another made. */
    cr_assert_eq(wait_warm_family("--warm", 4, 5.0, pids, 16), 4);
    size_t kept = 0;
    for (int i = 0; i < 4; i++)
        kept += pid_in(pids[i], warm, 4);
    cr_assert_eq(kept, 2, "the spawner's ready pair is not among the warm ones now");
    sbx_result *r = tu_sh(second, "echo claimed", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "claimed\n");
    sbx_result_free(r);

    destroy_free(first);
    destroy_free(second);
    cr_assert(tu_wait_pid_gone(claimed[0], 5.0) && tu_wait_pid_gone(claimed[1], 5.0));
    /* Freeing the client ends the warm ones; nothing is left on disk. */
    sbx_client_free(c);
    cr_assert_eq(tu_wait_spares_gone(g_tmp, 0), 0, "freeing the client left a spare");
    cr_assert_eq(wait_warm_family("--warm", 0, 5.0, pids, 16), 0);
    cr_assert_eq(tu_count_entries(g_tmp), 0, "%s holds %d entries", g_tmp,
                 tu_count_entries(g_tmp));
    free(dir);
}

/* The spare directories in @dir (at most @max names, each freed by the
 * caller); their number. */
static size_t spares_in(const char *dir, char **names, size_t max)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, ".sbx-spare-", 11) == 0 && n < max)
            names[n++] = strdup(e->d_name);
    closedir(d);
    return n;
}

/* The pid of the process listening on spare @name's socket in @dir, as
 * SO_PEERCRED names it; asserts. */
static pid_t spare_listener(const char *dir, const char *name)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/%s/sock", dir, name);
    /* The socket's file exists from its bind on; it answers from its
     * listen on, a moment later: refused until then. */
    int fd, rc;
    double end = tu_now() + 5.0;
    for (;;) {
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert(fd >= 0);
        rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
        if (rc == 0 || errno != ECONNREFUSED || tu_now() >= end)
            break;
        close(fd);
        usleep(2000);
    }
    cr_assert_eq(rc, 0, "%s: %s", sa.sun_path, strerror(errno));
    struct ucred cred = { 0 };
    socklen_t len = sizeof cred;
    cr_assert_eq(getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len), 0);
    close(fd);
    return cred.pid;
}

/* A loop over one client with nothing between (create, destroy, create):
 * the second create takes a warm supervisor that was made before the first
 * one's destroy, the one the spawner kept ready, instead of waiting for one
 * to be made. Before the first create two spares exist, each with its
 * listening supervisor; the two sandboxes are served by those two, one
 * each. */
Test(warm, a_create_right_after_a_destroy_takes_the_spare_made_ahead)
{
    cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    pid_t pids[16];
    sbx_client *c = client_of("local");
    destroy_free(create_in(c));
    cr_assert_eq(wait_warm_family("--warm", 4, 5.0, pids, 16), 4);
    char *names[4] = { NULL };
    double end = tu_now() + 5.0;
    size_t n;
    /* Each has its socket listening once the fill that made it is done. */
    while ((n = spares_in(g_tmp, names, 4)) != 2 && tu_now() < end) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        usleep(5000);
    }
    cr_assert_eq(n, 2, "%zu spares in %s after a create and a destroy", n, g_tmp);
    for (int i = 0; i < 2; i++) {
        char *sock = tu_strdup_printf("%s/%s/sock", g_tmp, names[i]);
        for (end = tu_now() + 5.0; !tu_exists(sock) && tu_now() < end;)
            usleep(2000);
        free(sock);
    }
    pid_t made[2] = { spare_listener(g_tmp, names[0]), spare_listener(g_tmp, names[1]) };
    cr_assert(made[0] > 1 && made[1] > 1 && made[0] != made[1]);

    sbx_sandbox *a = create_in(c);
    char *json = session_state(a);
    pid_t sup_a = (pid_t)state_int(json, "supervisor_pid");
    free(json);
    destroy_free(a);
    sbx_sandbox *b = create_in(c);
    json = session_state(b);
    pid_t sup_b = (pid_t)state_int(json, "supervisor_pid");
    free(json);
    cr_assert(pid_in(sup_a, made, 2), "the first sandbox's supervisor %d is not %d or %d",
              (int)sup_a, (int)made[0], (int)made[1]);
    cr_assert(pid_in(sup_b, made, 2) && sup_b != sup_a,
              "the second sandbox's supervisor %d is not the other of %d and %d", (int)sup_b,
              (int)made[0], (int)made[1]);
    expect_sh(b, "echo b2b", "b2b\n");
    destroy_free(b);
    sbx_client_free(c);
    cr_assert_eq(tu_wait_spares_gone(g_tmp, 0), 0, "freeing the client left a spare");
    cr_assert_eq(wait_warm_family("--warm", 0, 5.0, pids, 16), 0);
    cr_assert_eq(tu_count_entries(g_tmp), 0);
    for (size_t i = 0; i < 2; i++)
        free(names[i]);
}

/* The pid a pidfd held by a child of this process (its subreaper) saying
 * --warm names (its /proc/PID/fdinfo "Pid:" line): the keeper of the warm
 * supervisor the client's spawner keeps ready, the only pidfd such a
 * process holds; 0 when none is found. */
static pid_t ready_keeper(void)
{
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    struct dirent *e;
    pid_t found = 0;
    while (!found && (e = readdir(d)) != NULL) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 1 || tu_ppid(pid) != getpid() || !supervisor_of(pid, "--warm"))
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fdinfo", (int)pid);
        DIR *fds = opendir(path);
        if (!fds)
            continue;
        struct dirent *f;
        while (!found && (f = readdir(fds)) != NULL) {
            char *info = tu_strdup_printf("%s/%s", path, f->d_name), line[256];
            FILE *in = f->d_name[0] != '.' ? fopen(info, "re") : NULL;
            while (in && !found && fgets(line, sizeof line, in))
                if (strncmp(line, "Pid:", 4) == 0)
                    found = (pid_t)atoi(line + 4);
            if (in)
                fclose(in);
            free(info);
        }
        closedir(fds);
    }
    closedir(d);
    return found;
}

/* The keeper of the warm supervisor the spawner keeps ready is killed: the
 * spawner does not hand that one over (claimed, it would fail, as it cannot
 * tell its keeper the sandbox's paths) but a fresh one, so every create
 * succeeds: the one that takes the client's spare and the one after it.
 * Nothing is left once the client is freed. */
Test(warm, a_ready_spare_whose_keeper_was_killed_is_not_handed_over)
{
    cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    pid_t pids[16];
    sbx_client *c = client_of("local");
    destroy_free(create_in(c));
    cr_assert_eq(wait_warm_family("--warm", 4, 5.0, pids, 16), 4);
    pid_t keeper = ready_keeper();
    cr_assert(pid_in(keeper, pids, 4), "the ready keeper %d is not one of the warm %d %d %d %d",
              (int)keeper, (int)pids[0], (int)pids[1], (int)pids[2], (int)pids[3]);
    cr_assert_eq(kill(keeper, SIGKILL), 0);
    cr_assert(tu_wait_pid_gone(keeper, 5.0));
    for (int i = 0; i < 3; i++) {
        sbx_error *err = NULL;
        sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
        cr_assert_not_null(sb, "create %d after the kill: %s", i,
                           err ? sbx_error_get0_message(err) : "");
        expect_sh(sb, "echo made", "made\n");
        destroy_free(sb);
    }
    sbx_client_free(c);
    cr_assert_eq(tu_wait_spares_gone(g_tmp, 0), 0, "freeing the client left a spare");
    cr_assert_eq(wait_warm_family("--warm", 0, 5.0, pids, 16), 0);
    cr_assert_eq(tu_count_entries(g_tmp), 0);
}

/* The names in @dir, sorted, space-separated (free()). */
static char *entries_of(const char *dir)
{
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort);
    cr_assert(n >= 0, "scandir %s: %s", dir, strerror(errno));
    char *out = strdup("");
    for (int i = 0; i < n; i++) {
        if (strcmp(list[i]->d_name, ".") != 0 && strcmp(list[i]->d_name, "..") != 0) {
            char *next = tu_strdup_printf("%s%s%s", out, *out ? " " : "", list[i]->d_name);
            free(out);
            out = next;
        }
        free(list[i]);
    }
    free(list);
    return out;
}

/* What create leaves in a sandbox's directory, started cold (the first;
 * with the supervisor's log) and warm (the second): the record (naming
 * this process's uid, a root of its own and the tmp/ it made), the socket
 * and the root with its tmp/, mode 0700, all there when create returns
 * (the root is made while the supervisor starts). Destroy removes it all,
 * a command's tree included (an empty directory, a directory without
 * rights holding a file, a symlink out of the sandbox, which is not
 * followed), and nothing else. */
Test(warm, create_makes_the_directory_and_destroy_removes_it_cold_and_warm)
{
    sbx_client *c = client_of("local");
    char *outside = tu_strdup_printf("%s/outside", g_tmp);
    FILE *f = fopen(outside, "w");
    cr_assert_not_null(f);
    fputs("kept\n", f);
    cr_assert_eq(fclose(f), 0);
    const char *want[2] = { "log record root sock", "record root sock" };
    for (int i = 0; i < 2; i++) {
        sbx_sandbox *sb = create_in(c);
        char *meta = tu_strdup_printf("%s/%s", g_tmp, sbx_sandbox_get0_id(sb));
        char *names = entries_of(meta);
        cr_assert_str_eq(names, want[i], "sandbox %d", i);
        free(names);
        char *root = tu_strdup_printf("%s/root", meta);
        names = entries_of(root);
        cr_assert_str_eq(names, "tmp", "sandbox %d", i);
        free(names);
        char *tmp = tu_strdup_printf("%s/root/tmp", meta);
        struct stat st;
        cr_assert_eq(stat(tmp, &st), 0);
        cr_assert(S_ISDIR(st.st_mode));
        cr_assert_eq(st.st_mode & 07777, 0700, "%s: %o", tmp, st.st_mode & 07777);
        cr_assert_eq(stat(root, &st), 0);
        cr_assert_eq(st.st_mode & 07777, 0700, "%s: %o", root, st.st_mode & 07777);

        char *recfile = tu_strdup_printf("%s/record", meta);
        json_object *rec = json_object_from_file(recfile), *v;
        cr_assert_not_null(rec, "%s", recfile);
        cr_assert(json_object_object_get_ex(rec, "supervisor_uid", &v));
        cr_assert_eq(json_object_get_int64(v), (int64_t)geteuid());
        cr_assert(json_object_object_get_ex(rec, "root", &v));
        cr_assert_str_eq(json_object_get_string(v), root);
        cr_assert(json_object_object_get_ex(rec, "owns_root", &v));
        cr_assert_eq(json_object_get_boolean(v), 1);
        cr_assert(json_object_object_get_ex(rec, "made_tmp", &v));
        cr_assert_eq(json_object_get_boolean(v), 1);
        json_object_put(rec);

        char *script = tu_strdup_printf(
            "mkdir -p empty full/deeper locked && echo x > full/deeper/file"
            " && echo y > locked/file && chmod 000 locked"
            " && ln -s '%s' link && echo \"$TMPDIR\" && echo z > \"$TMPDIR/t\"", outside);
        char *tmp_line = tu_strdup_printf("%s\n", tmp);
        expect_sh(sb, script, tmp_line);
        free(tmp_line);
        free(script);
        destroy_free(sb);
        cr_assert_eq(access(meta, F_OK), -1, "%s is left", meta);
        cr_assert_eq(errno, ENOENT);
        free(recfile);
        free(tmp);
        free(root);
        free(meta);
    }
    sbx_client_free(c);
    char kept[16] = "";
    f = fopen(outside, "r");
    cr_assert_not_null(f, "%s: %s", outside, strerror(errno));
    cr_assert_not_null(fgets(kept, sizeof kept, f));
    fclose(f);
    cr_assert_str_eq(kept, "kept\n");
    free(outside);
}

Test(warm, sbx_local_warm_0_starts_none_ahead)
{
    cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    cr_assert_eq(setenv("SBX_LOCAL_WARM", "0", 1), 0);
    pid_t pids[16];
    sbx_client *c = client_of("local");
    sbx_sandbox *first = create_in(c);
    sbx_sandbox *second = create_in(c);
    /* Each create spawned its own: nothing waits for a third. */
    usleep(300000);
    cr_assert_eq(wait_warm_family("--warm", 0, 0.5, pids, 16), 0);
    destroy_free(first);
    destroy_free(second);
    sbx_client_free(c);
    cr_assert_eq(unsetenv("SBX_LOCAL_WARM"), 0);
}

Test(warm, sigkill_of_the_process_holding_it_ends_the_warm_supervisor)
{
    cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t child = fork();
    cr_assert(child >= 0);
    if (child == 0) {
        close(ready[0]);
        sbx_error *err = NULL;
        sbx_client *c = sbx_client_new("local", &err);
        sbx_sandbox *sb = c ? sbx_sandbox_create(c, NULL, &err) : NULL;
        if (!sb || sbx_sandbox_destroy(sb, &err) < 0)
            _exit(3);
        sbx_sandbox_free(sb);
        if (write(ready[1], "x", 1) != 1)
            _exit(4);
        pause();
        _exit(0);
    }
    close(ready[1]);
    char x;
    cr_assert_eq(read(ready[0], &x, 1), 1);
    close(ready[0]);
    pid_t pids[16];
    /* The holder's warm keepers are this process's children (its
     * subreaper): the client's and the one its spawner keeps ready. */
    size_t n = wait_warm_family("--warm", 4, 5.0, pids, 16);
    cr_assert_eq(kill(child, SIGKILL), 0);
    cr_assert_eq(waitpid(child, NULL, 0), child);
    cr_assert_eq(n, 4, "%zu warm processes under the holder, not 4", n);
    double t0 = tu_now();
    for (int i = 0; i < 4; i++)
        cr_assert(tu_wait_pid_gone(pids[i], 5.0 - (tu_now() - t0)),
                  "5 s after kill -9 of its holder: %s", tu_proc_describe(pids[i]));
    cr_assert_eq(tu_count_entries(g_tmp), 0);
    /* Their keepers removed the directories they made ahead. */
    cr_assert_eq(tu_wait_spares_gone(g_tmp, 5.0), 0, "a warm supervisor's directory is left");
}

Test(warm, a_changed_supervisor_program_is_started_cold)
{
    cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    const char *orig = getenv("SBX_SUPERVISOR");
    cr_assert(orig && *orig, "SBX_SUPERVISOR is not set (run under make check)");
    char *bin = tu_mkdtemp("sbx-test-bin");
    char *copy = tu_strdup_printf("%s/sbx-supervisor", bin);
    char *cmd = tu_strdup_printf("cp '%s' '%s'", orig, copy);
    cr_assert_eq(system(cmd), 0);
    char *orig_copy = strdup(orig);

    pid_t pids[16];
    /* In process: the program is looked up in this process's environment
     * at each create (a plugin host keeps the environment it started
     * with). */
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_mode("local", SBX_PLUGIN_MODE_IN_PROCESS, &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *first = create_in(c);
    cr_assert_eq(wait_warm_family("--warm", 4, 5.0, pids, 16), 4);
    pid_t warm[4] = { pids[0], pids[1], pids[2], pids[3] };
    cr_assert_eq(setenv("SBX_SUPERVISOR", copy, 1), 0);
    sbx_sandbox *second = create_in(c);
    /* The warm ones of the old program were closed, not claimed: the
     * client's at this create, the spawner's ready one with that spawner
     * at the next fill. */
    double t0 = tu_now();
    for (int i = 0; i < 4; i++)
        cr_assert(tu_wait_pid_gone(warm[i], 5.0 - (tu_now() - t0)), "%s",
                  tu_proc_describe(warm[i]));
    char *dir = tu_strdup_printf("--sandbox-dir=%s/%s", g_tmp, sbx_sandbox_get0_id(second));
    size_t n = wait_warm_family(dir, 2, 5.0, pids, 16);
    cr_assert(n >= 1, "no supervisor names %s", dir);
    char exe[PATH_MAX], link[64];
    snprintf(link, sizeof link, "/proc/%d/exe", (int)pids[0]);
    ssize_t k = readlink(link, exe, sizeof exe - 1);
    cr_assert(k > 0);
    exe[k] = '\0';
    cr_assert_str_eq(exe, copy);

    destroy_free(first);
    destroy_free(second);
    sbx_client_free(c);
    cr_assert_eq(setenv("SBX_SUPERVISOR", orig_copy, 1), 0);
    tu_rmtree(bin);
    free(orig_copy);
    free(dir);
    free(cmd);
    free(copy);
    free(bin);
}

/* ---------------------------------------------------------- as nobody */

Test(supervisor, all_of_it_as_nobody, .timeout = 300)
{
    if (getuid() != 0) {
        cr_assert(getuid() != 0);   /* this run is the unprivileged one */
        return;
    }
    char *dir = tu_mkdtemp("nobody");
    cr_assert_eq(chmod(dir, 01777), 0);
    cr_assert_eq(chmod(g_tmp, 0711), 0);
    char *bin = tu_mkdtemp("nobody-bin");
    char *stage = tu_strdup_printf(
        "set -e; d='%s'; mkdir -p \"$d/lib\" \"$d/plugins\";"
        " cp -P .libs/libsbx.so* \"$d/lib/\";"
        " cp tests/.libs/test_local \"$d/test_local\";"
        " cp plugins/local/.libs/libsbx-local.so" BWRAP_PLUGIN " \"$d/plugins/\";"
        " cp \"$SBX_SUPERVISOR\" \"$d/sbx-supervisor\";"
        " cp \"$SBX_PLUGIN_HOST\" \"$d/sbx-plugin-host\";"
        " cp cli/.libs/sbx \"$d/sbx\";"
        " chmod -R a+rX \"$d\"; chmod 0755 \"$d\"", bin);
    cr_assert_eq(system(stage), 0, "staging for nobody failed: %s", stage);
    free(stage);
    char *log = tu_strdup_printf("%s/log", g_tmp);
    char *lib_path = tu_strdup_printf("%s/lib", bin);
    char *plugin_path = tu_strdup_printf("%s/plugins", bin);
    char *supervisor = tu_strdup_printf("%s/sbx-supervisor", bin);
    char *plugin_host = tu_strdup_printf("%s/sbx-plugin-host", bin);
    char *program = tu_strdup_printf("%s/test_local", bin);
    char *cli = tu_strdup_printf("%s/sbx", bin);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(98);
        if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
            _exit(97);
        unsetenv("BXFI_MAP");
        setenv("TMPDIR", dir, 1);
        setenv("HOME", dir, 1);
        setenv("LD_LIBRARY_PATH", lib_path, 1);
        setenv("SBX_PLUGIN_PATH", plugin_path, 1);
        setenv("SBX_SUPERVISOR", supervisor, 1);
        setenv("SBX_PLUGIN_HOST", plugin_host, 1);
        setenv("SBX_CLI", cli, 1);
        unsetenv("CRITERION_OUTPUTS");
        execl(program, "test_local", "-j1", (char *)NULL);
        _exit(96);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    char tail[4096] = "";
    int fd = open(log, O_RDONLY);
    if (fd >= 0) {
        off_t e = lseek(fd, 0, SEEK_END);
        lseek(fd, e > (off_t)sizeof tail - 1 ? e - (off_t)sizeof tail + 1 : 0, SEEK_SET);
        ssize_t k = read(fd, tail, sizeof tail - 1);
        tail[k > 0 ? k : 0] = '\0';
        close(fd);
    }
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "test_local as nobody: status %d; end of its output:\n%s", status, tail);
    cr_assert(strstr(tail, "Tested: " N_TESTS " | Passing: " N_TESTS
                                    " | Failing: 0 | Crashing: 0") != NULL,
              "%s", tail);
    tu_rmtree(bin);
    tu_rmtree(dir);
    free(bin);
    free(dir);
    free(log);
    free(lib_path);
    free(plugin_path);
    free(supervisor);
    free(plugin_host);
    free(program);
    free(cli);
}

/*
 * Destroy and the trash. DESTROYED comes once every process of the sandbox
 * has ended and its meta directory was renamed to its trash name
 * (proto.h): destroy returns then, and the supervisor removes the trash
 * after answering, its keeper should it die first, a later client's sweep
 * should both die.
 */
Test(warm, destroy_returns_with_the_directory_gone_and_the_supervisor_removes_its_trash)
{
    sbx_client *c = client_of("local");
    for (int i = 0; i < 2; i++) {
        /* The first one cold, the second warm. */
        sbx_sandbox *sb = create_in(c);
        char *json = session_state(sb);
        char *meta = state_str(json, "meta");
        pid_t sup = (pid_t)state_int(json, "supervisor_pid");
        char *trash = tu_strdup_printf("%s/.sbx-trash-%s", g_tmp, sbx_sandbox_get0_id(sb));
        expect_sh(sb, "mkdir -p a/b/c && echo x > a/b/c/f && chmod 000 a/b && echo y > \"$TMPDIR/t\"",
                  "");
        destroy_free(sb);
        cr_assert(!tu_exists(meta), "sandbox %d: %s is left after destroy", i, meta);
        cr_assert(tu_wait_pid_gone(sup, 5.0), "sandbox %d: its supervisor %d still runs 5 s "
                  "after destroy: %s", i, (int)sup, tu_proc_describe(sup));
        cr_assert(!tu_exists(trash), "sandbox %d: %s is left", i, trash);
        cr_assert_eq(tu_count_entries(g_tmp), 0, "sandbox %d: %d entries in %s", i,
                     tu_count_entries(g_tmp), g_tmp);
        free(trash);
        free(meta);
        free(json);
    }
    sbx_client_free(c);
}

Test(supervisor, the_keeper_removes_the_trash_of_a_supervisor_killed_before_removing_it)
{
    sbx_client *c = client_of("local");
    sbx_sandbox *sb = create_in(c);
    char *json = session_state(sb);
    char *meta = state_str(json, "meta");
    pid_t sup = (pid_t)state_int(json, "supervisor_pid");
    /* What a supervisor killed between its rename and the removal leaves. */
    char *trash = tu_strdup_printf("%s/.sbx-trash-%s", g_tmp, sbx_sandbox_get0_id(sb));
    char *root = tu_strdup_printf("%s/root", trash);
    char *inner = tu_strdup_printf("%s/root/tmp", trash);
    char *rec = tu_strdup_printf("%s/record", trash);
    cr_assert_eq(mkdir(trash, 0700), 0);
    cr_assert_eq(mkdir(root, 0700), 0);
    cr_assert_eq(mkdir(inner, 0700), 0);
    tu_write_file(rec, "{}", 2, 0600);
    double t0 = tu_now();
    cr_assert_eq(kill(sup, SIGKILL), 0);
    while ((tu_exists(meta) || tu_exists(trash)) && tu_now() - t0 < 5.0)
        usleep(20000);
    cr_assert(!tu_exists(trash), "%s is left 5 s after kill -9 of the supervisor", trash);
    cr_assert(!tu_exists(meta), "%s is left 5 s after kill -9 of the supervisor", meta);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    cr_assert_eq(tu_count_entries(g_tmp), 0);
    free(rec);
    free(inner);
    free(root);
    free(trash);
    free(meta);
    free(json);
}

Test(warm, trash_names_and_the_sweep_of_stale_trash)
{
    char *t = proto_trash_path("/tmp/sbx-local-Ab12Cd");
    cr_assert_str_eq(t, "/tmp/.sbx-trash-sbx-local-Ab12Cd");
    free(t);
    t = proto_trash_path("/sbx-local-x");
    cr_assert_str_eq(t, "/.sbx-trash-sbx-local-x");
    free(t);
    errno = 0;
    cr_assert_null(proto_trash_path("/tmp/"));
    cr_assert_eq(errno, EINVAL);

    /* A trash directory with a tree in it, a live sandbox's directory, a
     * file that only looks like trash. */
    char *old = tu_strdup_printf("%s/.sbx-trash-sbx-local-old", g_tmp);
    char *oroot = tu_strdup_printf("%s/root", old);
    char *deep = tu_strdup_printf("%s/root/a", old);
    char *live = tu_strdup_printf("%s/sbx-local-live", g_tmp);
    char *file = tu_strdup_printf("%s/.sbx-trash-file", g_tmp);
    cr_assert_eq(mkdir(old, 0700), 0);
    cr_assert_eq(mkdir(oroot, 0700), 0);
    cr_assert_eq(mkdir(deep, 0500), 0);
    cr_assert_eq(mkdir(live, 0700), 0);
    tu_write_file(file, "x", 1, 0600);
    /* Younger than the age asked: a supervisor is still removing it. */
    cr_assert_eq(proto_sweep_trash(g_tmp, 3600), 0);
    cr_assert(tu_exists(old));
    cr_assert_eq(proto_sweep_trash(g_tmp, 0), 1);
    cr_assert(!tu_exists(old), "%s is left", old);
    cr_assert(tu_exists(live), "the sweep removed %s", live);
    cr_assert(tu_exists(file), "the sweep removed %s", file);
    cr_assert_eq(proto_sweep_trash(g_tmp, 0), 0);
    free(old);
    free(oroot);
    free(deep);
    free(live);
    free(file);
}

/* Binds a unix socket at @path; listening (the descriptor returned, to be
 * closed by the caller) or not (closed at once: a dead listener's file). */
static int bind_sock(const char *path, int listening)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    cr_assert_lt(strlen(path), sizeof sa.sun_path);
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0, "%s", strerror(errno));
    if (!listening) {
        close(fd);
        return -1;
    }
    cr_assert_eq(listen(fd, 4), 0);
    return fd;
}

/* The sweep takes a spare directory whose supervisor and keeper are both
 * gone (nothing listens on its socket, or it has none) and leaves a live
 * spare (its socket listening) and one whose "sock" is not a socket. */
Test(warm, the_sweep_takes_dead_spares_only)
{
    char *dead = tu_strdup_printf("%s/.sbx-spare-dead01", g_tmp);
    char *nosock = tu_strdup_printf("%s/.sbx-spare-nosck1", g_tmp);
    char *live = tu_strdup_printf("%s/.sbx-spare-live01", g_tmp);
    char *odd = tu_strdup_printf("%s/.sbx-spare-file01", g_tmp);
    char *p;
    for (char **d = (char *[]){ dead, nosock, live, odd, NULL }; *d; d++) {
        cr_assert_eq(mkdir(*d, 0700), 0);
        p = tu_strdup_printf("%s/root", *d);
        cr_assert_eq(mkdir(p, 0700), 0);
        free(p);
    }
    p = tu_strdup_printf("%s/sock", dead);
    bind_sock(p, 0);
    free(p);
    p = tu_strdup_printf("%s/sock", live);
    int lfd = bind_sock(p, 1);
    free(p);
    p = tu_strdup_printf("%s/sock", odd);
    tu_write_file(p, "x", 1, 0600);
    free(p);
    /* Younger than the age asked: left whatever their state. */
    cr_assert_eq(proto_sweep_trash(g_tmp, 3600), 0);
    cr_assert(tu_exists(dead) && tu_exists(nosock));
    cr_assert_eq(proto_sweep_trash(g_tmp, 0), 2);
    cr_assert(!tu_exists(dead), "%s is left", dead);
    cr_assert(!tu_exists(nosock), "%s is left", nosock);
    cr_assert(tu_exists(live), "the sweep removed the live spare %s", live);
    cr_assert(tu_exists(odd), "the sweep removed %s", odd);
    /* The live spare's listener got a connection that hung up. */
    int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    cr_assert_geq(c, 0);
    char b;
    cr_assert_eq(read(c, &b, 1), 0);
    close(c);
    close(lfd);
    cr_assert_eq(proto_rm_tree(live), 0);
    cr_assert_eq(proto_rm_tree(odd), 0);
    free(dead);
    free(nosock);
    free(live);
    free(odd);
}

/* A trash the supervisor cannot remove (as root: a file system mounted in
 * it, which a removal never enters) is the only thing its keeper then
 * removes: not the tmp directory in the caller's workdir, which a new
 * sandbox may already use (as another user, the trash is removed and the
 * same holds). */
Test(supervisor, a_trash_left_after_destroy_is_all_the_keeper_removes)
{
    sbx_client *c = client_of("local");
    char *wd = tu_strdup_printf("%s/work", g_tmp);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workdir(o, wd, NULL), 0);
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(c, o, &err);
    cr_assert_not_null(sb, "create: %s", err ? sbx_error_get0_message(err) : "");
    sbx_options_free(o);
    char *json = session_state(sb);
    char *meta = state_str(json, "meta");
    pid_t sup = (pid_t)state_int(json, "supervisor_pid");
    pid_t keeper = tu_ppid(sup);
    cr_assert(keeper > 1, "no keeper above the supervisor %d", (int)sup);
    char *mnt = tu_strdup_printf("%s/mnt", meta);
    char *trash = tu_strdup_printf("%s/.sbx-trash-%s", g_tmp, sbx_sandbox_get0_id(sb));
    char *tmnt = tu_strdup_printf("%s/mnt", trash);
    cr_assert_eq(mkdir(mnt, 0700), 0);
    /* Enough for the removal to last past the making of the next tmp. */
    char *bulk = tu_strdup_printf("%s/bulk", meta);
    cr_assert_eq(mkdir(bulk, 0700), 0);
    for (int i = 0; i < 3000; i++) {
        char name[64];
        snprintf(name, sizeof name, "%d", i);
        int fd = openat(AT_FDCWD, bulk, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        cr_assert(fd >= 0);
        int f = openat(fd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        cr_assert(f >= 0);
        close(f);
        close(fd);
    }
    free(bulk);
    int mounted = geteuid() == 0;
    if (mounted)
        cr_assert_eq(mount("none", mnt, "tmpfs", 0, "size=64k"), 0, "mount: %s", strerror(errno));
    destroy_free(sb);
    cr_assert(!tu_exists(meta), "%s is left after destroy", meta);
    /* What the next sandbox in the same workdir makes at once. */
    char *wtmp = tu_strdup_printf("%s/tmp", wd);
    char *mine = tu_strdup_printf("%s/tmp/mine", wd);
    cr_assert_eq(mkdir(wtmp, 0700), 0, "%s: %s", wtmp, strerror(errno));
    tu_write_file(mine, "x", 1, 0600);
    int ended = tu_wait_pid_gone(sup, 5.0) && tu_wait_pid_gone(keeper, 5.0);
    int kept = tu_exists(mine), left = tu_exists(tmnt);
    /* Unmounted first, whatever the outcome. */
    int unmounted = !mounted || umount2(tmnt, MNT_DETACH) == 0;
    cr_assert(ended, "the supervisor %d or its keeper %d still runs 5 s after destroy",
              (int)sup, (int)keeper);
    cr_assert(kept, "%s was removed after destroy", mine);
    cr_assert(unmounted, "umount %s: %s", tmnt, strerror(errno));
    if (mounted) {
        /* Both tried; what is on the other file system stays. */
        cr_assert(left, "%s is gone", tmnt);
        tu_rmtree(trash);
    }
    cr_assert(!tu_exists(trash), "%s is left", trash);
    tu_rmtree(wd);
    sbx_client_free(c);
    cr_assert_eq(tu_count_entries(g_tmp), 0);
    free(mine);
    free(wtmp);
    free(tmnt);
    free(trash);
    free(mnt);
    free(meta);
    free(json);
    free(wd);
}

/*
 * Destroy returns once no process the sandbox's commands started is alive
 * (proto.h, DESTROY), whether the supervisor had to end them (a background
 * sleep, and one escaped through setsid and a parent that exited: the
 * reaper is busy) or only its idle exec reapers were left (the supervisor
 * then answers once they were sent SIGKILL): every command pid is gone
 * when destroy returns, with no wait; the reapers and the supervisor end
 * within 5 s.
 */
Test(supervisor, destroy_returns_once_no_command_process_is_alive)
{
    sbx_client *c = client_of("local");
    for (int busy = 0; busy < 2; busy++) {
        sbx_sandbox *sb = create_in(c);
        char *json = session_state(sb);
        pid_t sup = (pid_t)state_int(json, "supervisor_pid");
        const char *cmd = busy ? "sleep 300 >/dev/null 2>&1 & echo $!; "
                                 "setsid sh -c 'sleep 300 >/dev/null 2>&1 & echo $!' "
                                 "</dev/null; echo $$"
                               : "echo $$";
        sbx_result *r = tu_sh(sb, cmd, 10);
        tu_assert_exit(r, 0);
        pid_t pids[3];
        size_t n = 0;
        const char *p = sbx_result_get0_stdout(r, NULL);
        for (char *end; n < 3 && *p; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            pids[n++] = (pid_t)v;
            while (*end == '\n')
                end++;
        }
        sbx_result_free(r);
        cr_assert_eq(n, busy ? 3u : 1u, "sandbox %d: %zu pids", busy, n);
        for (size_t i = 0; i + 1 < n; i++)
            cr_assert_eq(tu_pid_gone(pids[i]), 0, "background pid %d is not running",
                         (int)pids[i]);
        pid_t reapers[16];
        size_t nr = children_of(sup, reapers, 16);
        cr_assert_geq(nr, 1u, "the supervisor %d has no exec reaper", (int)sup);
        destroy_free(sb);
        for (size_t i = 0; i < n; i++)
            cr_assert(tu_pid_gone(pids[i]), "sandbox %d: pid %d runs after destroy returned: %s",
                      busy, (int)pids[i], tu_proc_describe(pids[i]));
        for (size_t i = 0; i < nr; i++)
            cr_assert(tu_wait_pid_gone(reapers[i], 5.0), "reaper %d: %s", (int)reapers[i],
                      tu_proc_describe(reapers[i]));
        cr_assert(tu_wait_pid_gone(sup, 5.0), "%s", tu_proc_describe(sup));
        free(json);
    }
    sbx_client_free(c);
}

/* ------------------------------------------------ out of descriptors */

/* Fills every free descriptor but @keep with copies of /dev/null; returns
 * how many it took (they are 3 + @keep ... in ascending order in @fds). */
static int fill_fds(int *fds, int max, int keep)
{
    int n = 0, f;
    while (n < max && (f = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        fds[n++] = f;
    for (int i = 0; i < keep && n > 0; i++)
        close(fds[--n]);
    return n;
}

static void unfill_fds(int *fds, int n)
{
    while (n > 0)
        close(fds[--n]);
}

static void expect_exhausted(sbx_error *err, const char *what)
{
    cr_assert_not_null(err, "%s succeeded with no descriptor left", what);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_RESOURCE_EXHAUSTED, "%s: [%s] %s", what,
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
    cr_assert(strstr(sbx_error_get0_message(err), "Too many open files"), "%s: %s", what,
              sbx_error_get0_message(err));
    cr_assert_eq(sbx_error_is_retryable(err), 0, "%s: resource_exhausted is not retryable",
                 what);
}

/*
 * The process out of descriptors (RLIMIT_NOFILE 128, every one taken): an
 * exec, a read and a write of a live sandbox fail with resource_exhausted
 * naming EMFILE (never connection, authentication or not_found: the
 * sandbox is not taken for gone), and once descriptors are back the same
 * sandbox runs commands again; in both plugin modes.
 */
static void calls_out_of_descriptors(sbx_plugin_mode mode)
{
    struct rlimit rl = { 128, 128 };
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_mode("local", mode, &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
    cr_assert_not_null(sb, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_result *r = tu_sh(sb, "echo warm", 10);
    tu_assert_stdout(r, "warm\n");
    sbx_result_free(r);

    int fds[256];
    int n = fill_fds(fds, 256, 0);
    r = sbx_sandbox_execute_shell(sb, "echo x", &err);
    cr_assert_null(r);
    expect_exhausted(err, "exec");
    sbx_error_free(err);
    err = NULL;
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file(sb, "/nope", &data, &len, &err), -1);
    expect_exhausted(err, "read_file");
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(sb, "/a.txt", "hi", 2, &err), -1);
    expect_exhausted(err, "write_file");
    sbx_error_free(err);
    err = NULL;
    unfill_fds(fds, n);

    r = tu_sh(sb, "echo after; cat \"$SANDBOX_ROOT/a.txt\" 2>/dev/null || echo no-file", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "after\nno-file\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    cr_assert_eq(tu_wait_spares_gone(g_tmp, 5.0), 0);
    cr_assert_eq(tu_count_entries(g_tmp), 0, "%s is not empty", g_tmp);
}

Test(supervisor, calls_out_of_descriptors_are_resource_exhausted_out_of_process)
{
    calls_out_of_descriptors(SBX_PLUGIN_MODE_OUT_OF_PROCESS);
}

Test(supervisor, calls_out_of_descriptors_are_resource_exhausted_in_process)
{
    calls_out_of_descriptors(SBX_PLUGIN_MODE_IN_PROCESS);
}

/*
 * Creates with 0 to 24 descriptors left, in process (where the plugin
 * runs short itself): each either makes a sandbox that works or fails
 * with resource_exhausted, and a failed one leaves nothing in TMPDIR (its
 * directory is removed by name when no descriptor is left to walk it).
 */
static void creates_short_of_descriptors(const char *backend)
{
    struct rlimit rl = { 128, 128 };
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    setenv("SBX_LOCAL_WARM", "0", 1);
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_mode(backend, SBX_PLUGIN_MODE_IN_PROCESS, &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    int failed = 0, made = 0;
    for (int keep = 0; keep <= 24; keep++) {
        int fds[256];
        int n = fill_fds(fds, 256, keep);
        sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
        unfill_fds(fds, n);
        if (!sb) {
            expect_exhausted(err, "create");
            sbx_error_free(err);
            err = NULL;
            cr_assert_eq(tu_count_entries(g_tmp), 0, "a create with %d descriptors left "
                         "left something in %s", keep, g_tmp);
            failed++;
            continue;
        }
        made++;
        sbx_result *r = tu_sh(sb, "echo made", 10);
        tu_assert_stdout(r, "made\n");
        sbx_result_free(r);
        cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "%s",
                     err ? sbx_error_get0_message(err) : "");
        sbx_sandbox_free(sb);
        cr_assert_eq(tu_wait_spares_gone(g_tmp, 5.0), 0);
    }
    fprintf(stderr, "# creates short of descriptors: %d failed cleanly, %d made\n", failed,
            made);
    cr_assert_gt(failed, 0, "no create ran short of descriptors");
    cr_assert_gt(made, 0, "no create succeeded with 24 descriptors left");
    sbx_client_free(c);
}

Test(supervisor, creates_short_of_descriptors_fail_cleanly)
{
    creates_short_of_descriptors("local");
}

#ifdef SBX_TEST_BUBBLEWRAP
Test(supervisor, bubblewrap_creates_short_of_descriptors_fail_cleanly)
{
    creates_short_of_descriptors("bubblewrap");
}

/*
 * Bubblewrap clients out of process whose plugin host may open 8 to 32
 * descriptors (RLIMIT_NOFILE when it starts): each client's first create,
 * which checks that bwrap can make an unprivileged sandbox, either makes a
 * sandbox or fails with resource_exhausted naming EMFILE, never with a
 * configuration error blaming bubblewrap or the host's user namespaces,
 * and leaves nothing in TMPDIR.
 */
Test(supervisor, bubblewrap_host_short_of_descriptors_is_resource_exhausted)
{
    setenv("SBX_LOCAL_WARM", "0", 1);
    int failed = 0, made = 0;
    for (int limit = 8; limit <= 32; limit++) {
        /* In a child: its limit, hard too (as `ulimit -n`), cannot be
         * raised back. Exit 0: made; 1: resource_exhausted; 2: else. */
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            sbx_error *err = NULL;
            struct rlimit low = { (rlim_t)limit, (rlim_t)limit };
            /* Only stdin, stdout and stderr, as a program started by a
             * shell: the shortage is the plugin host's. */
            for (int f = 3; f < 1024; f++)
                close(f);
            if (setrlimit(RLIMIT_NOFILE, &low) < 0)
                _exit(3);
            sbx_client *c = sbx_client_new_with_mode("bubblewrap",
                                                     SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err);
            sbx_sandbox *sb = c ? sbx_sandbox_create(c, NULL, &err) : NULL;
            int rc = 0;
            if (!sb) {
                rc = sbx_error_get_code(err) == SBX_ERROR_RESOURCE_EXHAUSTED
                     && strstr(sbx_error_get0_message(err), "Too many open files") ? 1 : 2;
                if (rc == 2)
                    fprintf(stderr, "limit %d: [%s] %s\n", limit,
                            sbx_error_code_name(sbx_error_get_code(err)),
                            sbx_error_get0_message(err));
                sbx_error_free(err);
            } else if (sbx_sandbox_destroy(sb, &err) < 0) {
                rc = 4;
            }
            sbx_sandbox_free(sb);
            sbx_client_free(c);
            _exit(rc);
        }
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) <= 1, "a create with a limit of %d "
                  "descriptors: status 0x%x (2: an error other than resource_exhausted)",
                  limit, st);
        if (WEXITSTATUS(st) == 1)
            failed++;
        else
            made++;
        cr_assert_eq(tu_wait_spares_gone(g_tmp, 5.0), 0);
        cr_assert_eq(tu_count_entries(g_tmp), 0, "a create with a limit of %d descriptors "
                     "left something in %s", limit, g_tmp);
    }
    cr_assert_gt(failed, 0, "no create ran short of descriptors");
    cr_assert_gt(made, 0, "no create succeeded with a limit of 32 descriptors");
}
#endif

/* proto_rm_tree with no descriptor left: a tree that is more than a meta
 * directory's known entries (files and directories three levels deep) is
 * still removed whole, by a child process with a table of its own. */
Test(supervisor, rm_tree_with_no_descriptor_left_removes_the_tree)
{
    char *top = tu_strdup_printf("%s/tree", g_tmp);
    char *cmd = tu_strdup_printf("mkdir -p '%s/a/b/c' '%s/root' && echo x > '%s/a/b/c/f' && "
                                 "echo y > '%s/root/g' && ln -s / '%s/a/link'", top, top, top,
                                 top, top);
    cr_assert_eq(system(cmd), 0);
    struct rlimit rl = { 128, 128 };
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    int fds[256];
    int n = fill_fds(fds, 256, 0);
    cr_assert_lt(open("/dev/null", O_RDONLY | O_CLOEXEC), 0, "a descriptor is still free");
    int rc = proto_rm_tree(top);
    int e = errno;
    unfill_fds(fds, n);
    cr_assert_eq(rc, 0, "proto_rm_tree: %s", strerror(e));
    cr_assert_eq(tu_exists(top), 0, "%s is still there", top);
    cr_assert(tu_exists("/bin"), "the symlink's target went too");
    free(cmd);
    free(top);
}

/* proto_rm_tree with 1 to 4 descriptors left: the walk opens the first
 * levels, runs short deeper down (EMFILE) and the tree is still removed
 * whole (the shortage is not taken for a directory that stays non-empty). */
Test(supervisor, rm_tree_short_of_descriptors_midway_removes_the_tree)
{
    struct rlimit rl = { 128, 128 };
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    for (int keep = 1; keep <= 4; keep++) {
        char *top = tu_strdup_printf("%s/tree", g_tmp);
        char *cmd = tu_strdup_printf("mkdir -p '%s/root/.sbx/a/b/c' '%s/work/work' && "
                                     "echo x > '%s/root/.sbx/a/b/c/f' && echo y > '%s/log'",
                                     top, top, top, top);
        cr_assert_eq(system(cmd), 0);
        int fds[256];
        int n = fill_fds(fds, 256, keep);
        int rc = proto_rm_tree(top);
        int e = errno;
        unfill_fds(fds, n);
        cr_assert_eq(rc, 0, "proto_rm_tree with %d descriptors left: %s", keep, strerror(e));
        cr_assert_eq(tu_exists(top), 0, "%s is still there (%d descriptors left)", top, keep);
        free(cmd);
        free(top);
    }
}

/* A sandbox in a caller's workdir made on the client's warm supervisor (the
 * second create) is served like a cold one: its exec answers, and destroy
 * ends it through its supervisor. Run by a user other than root too (the
 * nobody pass of this suite), where the supervisor's uid recorded for it
 * must be its listener's, not 0. */
Test(warm, a_warm_sandbox_in_a_workdir_takes_execs)
{
    char *wd = tu_strdup_printf("%s/wd", g_tmp);
    sbx_client *c = client_of("local");
    sbx_options *o = sbx_options_new();
    sbx_error *err = NULL;
    cr_assert_eq(mkdir(wd, 0755), 0);
    cr_assert_not_null(o);
    cr_assert_eq(sbx_options_set_workdir(o, wd, &err), 0);
    for (int i = 0; i < 2; i++) {
        sbx_sandbox *sb = tu_create(c, o);
        sbx_result *r = tu_sh(sb, "echo hi; pwd", 30);
        tu_assert_exit(r, 0);
        char *want = tu_strdup_printf("hi\n%s\n", wd);
        tu_assert_stdout(r, want);
        free(want);
        sbx_result_free(r);
        cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "destroy %d: %s", i,
                     err ? sbx_error_get0_message(err) : "");
        sbx_sandbox_free(sb);
    }
    sbx_options_free(o);
    sbx_client_free(c);
    free(wd);
}

/* The entries of directory @dir, space-separated, in @out ("" when none). */
static void list_entries(const char *dir, char *out, size_t size)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t len = 0;
    out[0] = '\0';
    cr_assert_not_null(d, "opendir %s: %s", dir, strerror(errno));
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        len += (size_t)snprintf(out + len, size - len, "%s%s", len ? " " : "", e->d_name);
        if (len >= size)
            break;
    }
    closedir(d);
}

/* A process creating and destroying sandboxes in a caller's workdir in a
 * loop (the first cold, the next on the client's warm supervisors),
 * SIGKILLed twelve times at points spread over 30..580 ms: within 10 s of
 * each kill the workdir is as it was, empty (the tmp/ a sandbox makes in
 * it is made by its supervisor, which its keeper or destroy removes), and
 * no sandbox directory is left. */
Test(warm, a_workdir_loop_killed_leaves_no_tmp)
{
    char *wd = tu_strdup_printf("%s/wd", g_tmp);
    char left[1024], dirs[1024];
    cr_assert_eq(mkdir(wd, 0755), 0);

    for (int k = 0; k < 12; k++) {
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
            sbx_error *err = NULL;
            sbx_client *c = sbx_client_new("local", &err);
            sbx_options *o = sbx_options_new();
            if (!c || !o || sbx_options_set_workdir(o, wd, &err) < 0)
                _exit(2);
            for (int i = 0; i < 100000; i++) {
                sbx_sandbox *sb = sbx_sandbox_create(c, o, &err);
                if (!sb)
                    _exit(3);
                sbx_sandbox_destroy(sb, NULL);
                sbx_sandbox_free(sb);
            }
            _exit(0);
        }
        usleep((useconds_t)(30000 + 50000 * k));
        kill(pid, SIGKILL);
        int st = 0;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "kill %d: status 0x%x", k, st);
        for (int i = 0; i < 200; i++) {
            list_entries(wd, left, sizeof left);
            list_entries(g_tmp, dirs, sizeof dirs);
            if (!left[0] && strcmp(dirs, "wd") == 0)
                break;
            usleep(50000);
        }
        cr_assert_str_empty(left, "kill %d (after %d ms): left in %s: %s", k, 30 + 50 * k, wd,
                            left);
        cr_assert_str_eq(dirs, "wd", "kill %d (after %d ms): left in %s: %s", k, 30 + 50 * k,
                         g_tmp, dirs);
    }
    free(wd);
}
