/*
 * The State and Concurrency sections of the conformance suite
 * (CONFORMANCE.md) on the backend named by $SBX_TEST_BACKEND (default
 * "local"): session_state round-trips through JSON, resume in another
 * process sees the same files and the same running background processes,
 * the state holds no credential and no env value; resume after destroy is
 * not_found; bad documents are invalid_argument; 20 sandboxes from 20
 * threads and one sandbox from 8 threads give exact results and leave
 * nothing behind.
 *
 * "Another process" is this test program run again as a small helper
 * (main() below: `test_state --resume-helper STATE SCRIPT [destroy]`),
 * started with posix_spawn: it resumes from the JSON, runs SCRIPT, prints
 * its stdout and exits with its exit code.
 *
 * Every test runs in its own process with TMPDIR set to a fresh directory,
 * which must be empty again after destroy on local.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include <sbx/sbx.h>

#include "testutil.h"

extern char **environ;

#define SECRET_VALUE "secret-value-123"

static char *g_tmp;           /* this test's TMPDIR */
static sbx_client *g_client;  /* client of the backend under test */

static void setup(void)
{
    g_tmp = tu_fresh_tmpdir();
    sbx_error *err = NULL;
    g_client = sbx_client_new(tu_backend(), &err);
    cr_assert_null(err, "sbx_client_new(%s): %s", tu_backend(),
                   err ? sbx_error_get0_message(err) : "");
}

static void teardown(void)
{
    sbx_client_free(g_client);
    g_client = NULL;
    tu_rmtree(g_tmp);
    free(g_tmp);
    g_tmp = NULL;
}

TestSuite(state, .init = setup, .fini = teardown, .timeout = 90);
TestSuite(concurrency, .init = setup, .fini = teardown, .timeout = 180);

/* ------------------------------------------------------------- helpers */

/* Asserts that nothing of the test's sandboxes is left on the host: the
 * TMPDIR is empty and no process mentions it. */
static void assert_nothing_left(void)
{
    /* bubblewrap: bwrap's command line names the sandbox's directory. */
    if (!tu_backend_is_local() && strcmp(tu_backend(), "bubblewrap") != 0)
        return;
    pid_t pids[16];
    size_t n = tu_wait_procs_gone(g_tmp, pids, 16, 5.0);
    cr_assert_eq(n, 0, "a process of a sandbox survived: %s",
                 n ? tu_proc_describe(pids[0]) : "");
    cr_assert_eq(tu_count_entries(g_tmp), 0, "%d entries left in %s",
                 tu_count_entries(g_tmp), g_tmp);
}

/* Whether the pids of the sandbox's processes can be looked at from here:
 * the host's own (a backend without SBX_CAP_ISOLATION), or bubblewrap's,
 * which tu_host_pid maps out of its namespace. Other isolated backends'
 * (containers, hosted providers) are checked from inside the sandbox. */
static int pids_seen_here(void)
{
    uint64_t caps = 0;
    cr_assert_eq(sbx_client_probe(g_client, &caps, NULL), 0);
    return !(caps & SBX_CAP_ISOLATION) || strcmp(tu_backend(), "bubblewrap") == 0;
}

/* A sandbox with env FOO=SECRET_VALUE (and @timeout_secs when > 0). */
static sbx_sandbox *create_with_secret(double timeout_secs)
{
    sbx_options *o = sbx_options_new();
    cr_assert_not_null(o);
    cr_assert_eq(sbx_options_set_env(o, "FOO", SECRET_VALUE, NULL), 0);
    if (timeout_secs > 0)
        cr_assert_eq(sbx_options_set_timeout_secs(o, timeout_secs, NULL), 0);
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    return sb;
}

static char *session_state(sbx_sandbox *sb)
{
    sbx_error *err = NULL;
    char *json = sbx_sandbox_session_state(sb, &err);
    cr_assert_null(err, "session_state: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_not_null(json);
    return json;
}

static sbx_sandbox *resume_ok(const char *json)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_resume(g_client, json, &err);
    cr_assert_null(err, "resume: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_not_null(sb);
    return sb;
}

/* Runs @script in @sb; asserts exit 0, empty stderr and stdout @want. */
static void expect_sh(sbx_sandbox *sb, const char *script, const char *want)
{
    sbx_result *r = tu_sh(sb, script, 20);
    tu_assert_stderr(r, "");
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, want);
    sbx_result_free(r);
}

/* Checks an error: @code, backend set, op @op, message non-empty. */
static void expect_error(sbx_error *err, sbx_error_code code, const char *op)
{
    cr_assert_not_null(err, "no error (expected %s)", sbx_error_code_name(code));
    cr_assert_eq(sbx_error_get_code(err), code, "code %s, expected %s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_code_name(code),
                 sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_op(err), op, "op \"%s\": %s", sbx_error_get0_op(err),
                     sbx_error_get0_message(err));
    cr_assert_neq(sbx_error_get0_message(err)[0], '\0');
    cr_assert_eq(sbx_error_is_retryable(err), 0);
}

/* 1 when a JSON key looks like it holds a credential. */
static int key_looks_secret(const char *key)
{
    static const char *const words[] = { "token", "key", "secret", "password", "passwd",
                                         "credential", "authorization", "auth", "env" };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcasestr(key, words[i]))
            return 1;
    return 0;
}

/* Asserts that no key anywhere in @o looks like a credential. */
static void assert_no_secret_keys(json_object *o, const char *where)
{
    if (json_object_is_type(o, json_type_object)) {
        json_object_object_foreach(o, key, val) {
            cr_assert(!key_looks_secret(key), "the state holds key \"%s\" in %s", key, where);
            assert_no_secret_keys(val, key);
        }
    } else if (json_object_is_type(o, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(o); i++)
            assert_no_secret_keys(json_object_array_get_idx(o, i), where);
    }
}

/* --------------------------------------------- the helper (other process) */

typedef struct helper_run {
    int status;
    char out[4096];
} helper_run;

/* Runs this program as `--resume-helper @state @script [@mode]` and
 * collects its stdout and exit status. */
static helper_run run_helper(const char *state, const char *script, const char *mode)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
    exe[n] = '\0';
    char *argv[] = { exe, "--resume-helper", (char *)state, (char *)script,
                     (char *)mode, NULL };
    int p[2];
    cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    /* Without the test runner's worker variables (BXFI_*): with them, the
     * program would start as one of its test workers. */
    size_t n_env = 0, j = 0;
    while (environ[n_env])
        n_env++;
    char **env = calloc(n_env + 1, sizeof *env);
    cr_assert_not_null(env);
    for (size_t i = 0; i < n_env; i++)
        if (strncmp(environ[i], "BXFI_", 5) != 0)
            env[j++] = environ[i];
    pid_t pid;
    int rc = posix_spawn(&pid, exe, &fa, NULL, argv, env);
    free(env);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    cr_assert_eq(rc, 0, "posix_spawn %s: %s", exe, strerror(rc));
    helper_run r = { 0 };
    size_t len = 0;
    for (;;) {
        ssize_t got = read(p[0], r.out + len, sizeof r.out - 1 - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
        cr_assert(len < sizeof r.out - 1, "the helper printed too much: %s", r.out);
    }
    r.out[len] = '\0';
    close(p[0]);
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws), "the helper died of signal %d", WTERMSIG(ws));
    r.status = WEXITSTATUS(ws);
    return r;
}

/*
 * The helper: resumes from @state, runs @script (when not empty) with its
 * stdout and stderr going to ours, then destroys the sandbox when @mode is
 * "destroy". Prints "error=CODE" and exits 3 when a library call fails;
 * otherwise exits with the script's exit code.
 */
static int resume_helper(const char *state, const char *script, const char *mode)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_resume(state, &err);
    if (!sb) {
        printf("error=%s\n", sbx_error_code_name(sbx_error_get_code(err)));
        fprintf(stderr, "resume: %s\n", sbx_error_get0_message(err));
        sbx_error_free(err);
        return 3;
    }
    int status = 0;
    if (*script) {
        sbx_result *r = sbx_sandbox_execute_shell(sb, script, &err);
        if (!r) {
            printf("error=%s\n", sbx_error_code_name(sbx_error_get_code(err)));
            sbx_error_free(err);
            sbx_sandbox_free(sb);
            return 3;
        }
        size_t n;
        const char *out = sbx_result_get0_stdout(r, &n);
        fwrite(out, 1, n, stdout);
        out = sbx_result_get0_stderr(r, &n);
        fwrite(out, 1, n, stderr);
        status = sbx_result_get_exit_code(r);
        sbx_result_free(r);
    }
    if (mode && strcmp(mode, "destroy") == 0 && sbx_sandbox_destroy(sb, &err) < 0) {
        printf("error=%s\n", sbx_error_code_name(sbx_error_get_code(err)));
        sbx_error_free(err);
        status = 3;
    }
    sbx_sandbox_free(sb);
    fflush(stdout);
    return status;
}

/* Visible: the test runner finds main by name to start its workers. */
__attribute__((visibility("default"))) int main(int argc, char *argv[]);

__attribute__((visibility("default"))) int main(int argc, char *argv[])
{
    if (argc >= 4 && strcmp(argv[1], "--resume-helper") == 0)
        return resume_helper(argv[2], argv[3], argc >= 5 ? argv[4] : NULL);
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true))
        result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}

/* ================================================================== State */

Test(state, session_state_round_trips_through_json)
{
    if (tu_backend_is_local()) {
        uint64_t caps = 0;
        cr_assert_eq(sbx_client_probe(g_client, &caps, NULL), 0);
        cr_assert(caps & SBX_CAP_RESUME, "local does not report resume (caps %#llx)",
                  (unsigned long long)caps);
    }
    sbx_sandbox *sb = create_with_secret(0);
    char *json = session_state(sb);

    /* The document: exactly these fields, with these values. */
    json_object *doc = json_tokener_parse(json);
    cr_assert_not_null(doc, "not JSON: %s", json);
    cr_assert(json_object_is_type(doc, json_type_object));
    cr_assert_eq(json_object_object_length(doc), 6, "fields: %s", json);
    json_object *v;
    cr_assert(json_object_object_get_ex(doc, "version", &v) &&
              json_object_is_type(v, json_type_int) && json_object_get_int(v) == 1, "%s", json);
    cr_assert(json_object_object_get_ex(doc, "backend", &v));
    cr_assert_str_eq(json_object_get_string(v), tu_backend());
    cr_assert(json_object_object_get_ex(doc, "id", &v));
    cr_assert_str_eq(json_object_get_string(v), sbx_sandbox_get0_id(sb));
    /* The size the sandbox was made with (the default), for pricing. */
    cr_assert(json_object_object_get_ex(doc, "size", &v));
    cr_assert_str_eq(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN),
                     "{\"cpu\":1,\"memory_mb\":1024}");
    cr_assert(json_object_object_get_ex(doc, "timeout_secs", &v) &&
              json_object_is_type(v, json_type_int) && json_object_get_int(v) == 600,
              "%s", json);
    cr_assert(json_object_object_get_ex(doc, "data", &v) &&
              json_object_is_type(v, json_type_object), "%s", json);
    if (tu_backend_is_local()) {
        json_object *root;
        cr_assert(json_object_object_get_ex(v, "root", &root), "%s", json);
        cr_assert_str_eq(json_object_get_string(root), sbx_sandbox_get0_root(sb));
    }

    /* No env value, no credential. */
    cr_assert_null(strstr(json, SECRET_VALUE), "the state holds the env value: %s", json);
    cr_assert_null(strstr(json, "FOO"), "the state names the env variable: %s", json);
    assert_no_secret_keys(doc, "the document");
    json_object_put(doc);

    /* Resumed in this process: the same sandbox, and the same state. */
    sbx_sandbox *again = resume_ok(json);
    cr_assert_str_eq(sbx_sandbox_get0_id(again), sbx_sandbox_get0_id(sb));
    cr_assert_str_eq(sbx_sandbox_get0_root(again), sbx_sandbox_get0_root(sb));
    cr_assert_str_eq(sbx_sandbox_get0_backend(again), tu_backend());
    cr_assert_eq(sbx_sandbox_is_alive(again, NULL), 1);
    char *json2 = session_state(again);
    cr_assert_str_eq(json2, json);
    free(json2);

    /* Files written through one handle are seen through the other, and
     * the environment given at create still reaches commands. */
    expect_sh(sb, "mkdir -p \"$SANDBOX_ROOT/work\"; printf one > \"$SANDBOX_ROOT/work/f\"", "");
    expect_sh(again, "cat \"$SANDBOX_ROOT/work/f\"; printf ' %s' \"$FOO\"",
              "one " SECRET_VALUE);

    /* Destroy through the resumed handle ends it for both. */
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(again, &err), 0);
    cr_assert_null(err);
    cr_assert_eq(sbx_sandbox_is_alive(sb, NULL), 0);
    err = tu_exec_fail(sb, &(sbx_exec_request){ .struct_size = sizeof(sbx_exec_request),
                                               .shell = "echo hi" },
                       SBX_ERROR_NOT_FOUND);
    sbx_error_free(err);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(again);
    sbx_sandbox_free(sb);
    free(json);
    assert_nothing_left();
}

Test(state, timeout_secs_comes_back_as_the_default_exec_timeout)
{
    sbx_sandbox *sb = create_with_secret(1.5);
    char *json = session_state(sb);
    json_object *doc = json_tokener_parse(json), *v;
    cr_assert(json_object_object_get_ex(doc, "timeout_secs", &v) &&
              json_object_is_type(v, json_type_double) && json_object_get_double(v) == 1.5,
              "%s", json);
    json_object_put(doc);
    sbx_sandbox *again = resume_ok(json);
    double t0 = tu_now();
    sbx_result *r = tu_sh(again, "sleep 30", 0);
    double dt = tu_now() - t0;
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    cr_assert(dt < 1.5 + 5.0, "a 1.5 s timeout took %.2f s", dt);
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(again, NULL), 0);
    sbx_sandbox_free(again);
    sbx_sandbox_free(sb);
    free(json);
    assert_nothing_left();
}

Test(state, resume_in_another_process_sees_files_and_background_processes)
{
    sbx_sandbox *sb = create_with_secret(0);
    expect_sh(sb,
              "mkdir -p \"$SANDBOX_ROOT/work\"; printf 'hello\\n' > \"$SANDBOX_ROOT/work/hello.txt\"; "
              "setsid nohup sleep 1000 >/dev/null 2>&1 </dev/null & "
              "echo $! > \"$SANDBOX_ROOT/tmp/bg.pid\"",
              "");
    pid_t bg;
    cr_assert_eq(tu_read_pids(sb, "$SANDBOX_ROOT/tmp/bg.pid", &bg, 1), 1);
    /* Its pid seen from here (bubblewrap: outside the sandbox's pid namespace). */
    int here = pids_seen_here();
    pid_t bg_host = here ? tu_host_pid(sb, bg) : 0;
    if (here)
        cr_assert_eq(tu_pid_gone(bg_host), 0, "the background sleep %d is not running",
                     (int)bg_host);
    char *json = session_state(sb);
    char *want = tu_strdup_printf("hello\nalive %d\n%s\n%s", (int)bg,
                                  sbx_sandbox_get0_root(sb), SECRET_VALUE);
    /* The handle goes away; the sandbox does not. */
    sbx_sandbox_free(sb);

    const char *script =
        "cat \"$SANDBOX_ROOT/work/hello.txt\"; P=$(cat \"$SANDBOX_ROOT/tmp/bg.pid\"); "
        "kill -0 \"$P\" && echo \"alive $P\"; echo \"$SANDBOX_ROOT\"; printf %s \"$FOO\"";
    helper_run h = run_helper(json, script, "");
    cr_assert_eq(h.status, 0, "helper exit %d, stdout: %s", h.status, h.out);
    cr_assert_str_eq(h.out, want);
    /* Twice: a resume leaves the sandbox as it was. */
    h = run_helper(json, script, "");
    cr_assert_eq(h.status, 0, "helper exit %d, stdout: %s", h.status, h.out);
    cr_assert_str_eq(h.out, want);
    if (here)
        cr_assert_eq(tu_pid_gone(bg_host), 0, "the background sleep %d died", (int)bg_host);

    /* Another process destroys it: the background process ends with it. */
    h = run_helper(json, "", "destroy");
    cr_assert_eq(h.status, 0, "helper exit %d, stdout: %s", h.status, h.out);
    cr_assert_str_eq(h.out, "");
    if (here)
        cr_assert(tu_wait_pid_gone(bg_host, 5.0), "background sleep survived: %s",
                  tu_proc_describe(bg_host));
    assert_nothing_left();

    /* And now it is gone for every process. */
    h = run_helper(json, "echo hi", "");
    cr_assert_eq(h.status, 3);
    cr_assert_str_eq(h.out, "error=not_found\n");
    sbx_error *err = NULL;
    cr_assert_null(sbx_resume(json, &err));
    expect_error(err, SBX_ERROR_NOT_FOUND, "resume");
    cr_assert_str_eq(sbx_error_get0_backend(err), tu_backend());
    sbx_error_free(err);
    free(want);
    free(json);
}

Test(state, resume_after_destroy_is_not_found)
{
    sbx_sandbox *sb = tu_create(g_client, NULL);
    char *json = session_state(sb);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);

    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_resume(g_client, json, &err));
    expect_error(err, SBX_ERROR_NOT_FOUND, "resume");
    cr_assert_str_eq(sbx_error_get0_backend(err), tu_backend());
    cr_assert_str_eq(sbx_error_get0_context(err, "sandbox_id"), sbx_sandbox_get0_id(sb));
    sbx_error_clear(&err);
    cr_assert_null(sbx_resume(json, &err));
    expect_error(err, SBX_ERROR_NOT_FOUND, "resume");
    sbx_error_clear(&err);

    /* No state of a destroyed sandbox either. */
    cr_assert_null(sbx_sandbox_session_state(sb, &err));
    expect_error(err, SBX_ERROR_NOT_FOUND, "session_state");
    sbx_error_clear(&err);
    sbx_sandbox_free(sb);
    free(json);
    assert_nothing_left();
}

/* Resumes @json with the test's client and expects invalid_argument whose
 * message contains @needle; sbx_resume() must fail with @resume_code. */
static void expect_invalid_code(const char *json, const char *needle,
                                sbx_error_code resume_code)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_resume(g_client, json, &err);
    cr_assert_null(sb, "resume of %s succeeded", json ? json : "NULL");
    expect_error(err, SBX_ERROR_INVALID_ARGUMENT, "resume");
    cr_assert_str_eq(sbx_error_get0_backend(err), tu_backend());
    cr_assert(strstr(sbx_error_get0_message(err), needle),
              "message \"%s\" lacks \"%s\" (document %s)", sbx_error_get0_message(err),
              needle, json ? json : "NULL");
    sbx_error_free(err);
    /* sbx_resume refuses the same documents, before it loads a plugin. */
    err = NULL;
    cr_assert_null(sbx_resume(json, &err));
    cr_assert_not_null(err);
    cr_assert_eq(sbx_error_get_code(err), resume_code, "sbx_resume: code %s, expected %s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)),
                 sbx_error_code_name(resume_code), sbx_error_get0_message(err));
    sbx_error_free(err);
}

static void expect_invalid(const char *json, const char *needle)
{
    expect_invalid_code(json, needle, SBX_ERROR_INVALID_ARGUMENT);
}

Test(state, malformed_unknown_version_and_wrong_backend_are_invalid_argument)
{
    sbx_sandbox *sb = tu_create(g_client, NULL);
    char *json = session_state(sb);
    json_object *doc = json_tokener_parse(json), *data;
    cr_assert(json_object_object_get_ex(doc, "data", &data));
    const char *d = json_object_to_json_string_ext(data, JSON_C_TO_STRING_PLAIN |
                                                         JSON_C_TO_STRING_NOSLASHESCAPE);
    const char *id = sbx_sandbox_get0_id(sb);
    const char *be = tu_backend();

    /* Malformed JSON. */
    expect_invalid(NULL, "NULL");
    expect_invalid("", "malformed JSON at offset 0 of 0 bytes: unexpected end of the document");
    expect_invalid("{", "malformed JSON at offset 1 of 1 bytes: unexpected end of the document");
    expect_invalid("not json", "malformed JSON at offset 1 of 8 bytes: null expected");
    char *s = tu_strdup_printf("%s trailing", json);
    char *want = tu_strdup_printf("malformed JSON at offset %zu of %zu bytes: unexpected text "
                                  "after the document", strlen(json) + 1, strlen(s));
    expect_invalid(s, want);
    free(want);
    free(s);
    expect_invalid("[1,2]", "a JSON object is expected");
    expect_invalid("\"state\"", "a JSON object is expected");
    expect_invalid(" null ", "a JSON object is expected, not null");

    /* Unknown or missing version. */
    s = tu_strdup_printf("{\"version\":2,\"backend\":\"%s\",\"id\":\"%s\","
                         "\"timeout_secs\":600,\"data\":%s}", be, id, d);
    expect_invalid(s, "unknown version 2");
    free(s);
    s = tu_strdup_printf("{\"version\":\"1\",\"backend\":\"%s\",\"id\":\"%s\","
                         "\"timeout_secs\":600,\"data\":%s}", be, id, d);
    expect_invalid(s, "\"version\" must be an integer");
    free(s);
    s = tu_strdup_printf("{\"backend\":\"%s\",\"id\":\"%s\",\"timeout_secs\":600,"
                         "\"data\":%s}", be, id, d);
    expect_invalid(s, "\"version\" is missing");
    free(s);

    /* Other fields. */
    s = tu_strdup_printf("{\"version\":1,\"backend\":\"%s\",\"timeout_secs\":600,"
                         "\"data\":%s}", be, d);
    expect_invalid(s, "\"id\" must be a non-empty string");
    free(s);
    s = tu_strdup_printf("{\"version\":1,\"backend\":\"%s\",\"id\":\"%s\","
                         "\"timeout_secs\":-2,\"data\":%s}", be, id, d);
    /* -1 is no lifetime (SBX_TIMEOUT_NONE); any other negative is malformed. */
    expect_invalid(s, "\"timeout_secs\" must be positive and finite, or -1 for no lifetime "
                   "(got -2)");
    free(s);
    /* -1 (no lifetime) only where the backend ends a sandbox with its
     * owners (local, bubblewrap, safehouse: resumed elsewhere). */
    uint64_t caps = 0;
    cr_assert_eq(sbx_client_probe(g_client, &caps, NULL), 0);
    if (!(caps & SBX_CAP_OWNER_WATCH)) {
        s = tu_strdup_printf("{\"version\":1,\"backend\":\"%s\",\"id\":\"%s\","
                             "\"timeout_secs\":-1,\"data\":%s}", be, id, d);
        want = tu_strdup_printf("\"timeout_secs\" -1 (no lifetime) is not for backend \"%s\": "
                                "it cannot end an attached sandbox when its owners end", be);
        expect_invalid(s, want);
        free(want);
        free(s);
    }
    s = tu_strdup_printf("{\"version\":1,\"backend\":\"%s\",\"id\":\"%s\","
                         "\"timeout_secs\":600,\"data\":[]}", be, id);
    expect_invalid(s, "\"data\" must be an object");
    free(s);
    s = tu_strdup_printf("{\"version\":1,\"backend\":\"%s\",\"id\":\"other\","
                         "\"timeout_secs\":600,\"data\":%s}", be, d);
    expect_invalid(s, "\"id\" is \"other\"");
    free(s);

    /* Another backend's state, given to this backend's client. */
    s = tu_strdup_printf("{\"version\":1,\"backend\":\"nosuchbackend\",\"id\":\"%s\","
                         "\"timeout_secs\":600,\"data\":%s}", id, d);
    /* (sbx_resume() loads the plugin the document names, missing here.) */
    expect_invalid_code(s, "for backend \"nosuchbackend\"", SBX_ERROR_BACKEND_NOT_INSTALLED);
    free(s);
    s = tu_strdup_printf("{\"version\":1,\"backend\":\"Bad Name\",\"id\":\"%s\","
                         "\"timeout_secs\":600,\"data\":%s}", id, d);
    expect_invalid(s, "not a backend name");
    free(s);

    if (tu_backend_is_local() || strcmp(be, "bubblewrap") == 0) {
        /* The local backend's own data (safehouse's and bubblewrap's too). */
        s = tu_strdup_printf("{\"version\":1,\"backend\":\"%s\",\"id\":\"%s\","
                             "\"timeout_secs\":600,\"data\":{}}", be, id);
        expect_invalid(s, "\"meta\" must be an absolute path");
        free(s);
        json_object *bad = json_tokener_parse(json), *bd;
        json_object_object_get_ex(bad, "data", &bd);
        json_object_object_add(bd, "supervisor_pid", json_object_new_string("12"));
        expect_invalid(json_object_to_json_string(bad), "\"supervisor_pid\" must be an integer");
        json_object_object_add(bd, "supervisor_pid", json_object_new_int(getpid()));
        json_object_object_add(bd, "owns_root", json_object_new_int(1));
        expect_invalid(json_object_to_json_string(bad), "\"owns_root\" must be true or false");
        json_object_put(bad);

        /* A live process that is not the supervisor: not_found. */
        bad = json_tokener_parse(json);
        json_object_object_get_ex(bad, "data", &bd);
        json_object_object_add(bd, "supervisor_pid", json_object_new_int(getpid()));
        sbx_error *err = NULL;
        cr_assert_null(sbx_sandbox_resume(g_client, json_object_to_json_string(bad), &err));
        expect_error(err, SBX_ERROR_NOT_FOUND, "resume");
        sbx_error_free(err);
        json_object_put(bad);
    }

    /* The real document still resumes after all that. */
    sbx_sandbox *again = resume_ok(json);
    expect_sh(again, "echo fine", "fine\n");
    sbx_sandbox_free(again);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    json_object_put(doc);
    free(json);
    assert_nothing_left();
}

Test(state, resume_without_a_client_is_invalid_argument)
{
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_resume(NULL, "{}", &err));
    expect_error(err, SBX_ERROR_INVALID_ARGUMENT, "resume");
    sbx_error_clear(&err);
    cr_assert_null(sbx_sandbox_session_state(NULL, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_free(err);
}

/* ============================================================ Concurrency */

struct life {
    sbx_client *client;
    int index;
    char failure[512];
};

/* One thread's sandbox: create, a state round trip, exec with exact
 * output through the resumed handle, destroy. */
static void *life_main(void *arg)
{
    struct life *p = arg;
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(p->client, NULL, &err), *again = NULL;
    char *json = NULL;
    if (!sb) {
        snprintf(p->failure, sizeof p->failure, "create: %s",
                 err ? sbx_error_get0_message(err) : "?");
        sbx_error_free(err);
        return NULL;
    }
    char script[160], want[64], ewant[64];
    snprintf(script, sizeof script,
             "echo %d > \"$SANDBOX_ROOT/tmp/i\"; cat \"$SANDBOX_ROOT/tmp/i\"; echo e%d >&2",
             p->index, p->index);
    snprintf(want, sizeof want, "%d\n", p->index);
    snprintf(ewant, sizeof ewant, "e%d\n", p->index);
    json = sbx_sandbox_session_state(sb, &err);
    if (json)
        again = sbx_sandbox_resume(p->client, json, &err);
    if (!again) {
        snprintf(p->failure, sizeof p->failure, "state: %s",
                 err ? sbx_error_get0_message(err) : "?");
        sbx_error_clear(&err);
    }
    for (int round = 0; round < 2 && !p->failure[0]; round++) {
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.shell = script;
        req.timeout_secs = 60;
        sbx_result *r = sbx_sandbox_execute_command(round ? again : sb, &req, &err);
        if (!r) {
            snprintf(p->failure, sizeof p->failure, "exec: %s",
                     err ? sbx_error_get0_message(err) : "?");
            sbx_error_clear(&err);
            break;
        }
        size_t n;
        const char *out = sbx_result_get0_stdout(r, &n);
        const char *e = sbx_result_get0_stderr(r, NULL);
        if (sbx_result_get_exit_code(r) != 0 || n != strlen(want) ||
            memcmp(out, want, n) != 0 || strcmp(e, ewant) != 0)
            snprintf(p->failure, sizeof p->failure, "exit %d stdout \"%.*s\" stderr \"%s\"",
                     sbx_result_get_exit_code(r), (int)n, out, e);
        sbx_result_free(r);
    }
    if (sbx_sandbox_destroy(again ? again : sb, &err) != 0 && !p->failure[0])
        snprintf(p->failure, sizeof p->failure, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "?");
    sbx_error_clear(&err);
    if (!p->failure[0] && sbx_sandbox_is_alive(sb, NULL) != 0)
        snprintf(p->failure, sizeof p->failure, "alive after destroy");
    sbx_sandbox_free(again);
    sbx_sandbox_free(sb);
    free(json);
    return NULL;
}

Test(concurrency, twenty_sandboxes_from_twenty_threads)
{
    enum { N = 20 };
    struct life p[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].client = g_client;
        p[i].index = i;
        cr_assert_eq(pthread_create(&t[i], NULL, life_main, &p[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++)
        cr_assert_eq(p[i].failure[0], '\0', "thread %d: %s", i, p[i].failure);
    assert_nothing_left();
}

struct user {
    sbx_sandbox *sb;
    int index;
    char failure[512];
};

/* One of several threads using one sandbox: execs whose output and files
 * are its own, and a session state. */
static void *user_main(void *arg)
{
    struct user *u = arg;
    for (int round = 0; round < 5 && !u->failure[0]; round++) {
        char script[256], want[64];
        snprintf(script, sizeof script,
                 "f=\"$SANDBOX_ROOT/tmp/t%d-%d\"; printf '%d.%d' > \"$f\"; cat \"$f\"; "
                 "printf ' %%s' \"$T\"", u->index, round, u->index, round);
        snprintf(want, sizeof want, "%d.%d thread-%d", u->index, round, u->index);
        char envv[32];
        snprintf(envv, sizeof envv, "T=thread-%d", u->index);
        const char *env[] = { envv, NULL };
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.shell = script;
        req.env = env;
        req.timeout_secs = 60;
        sbx_error *err = NULL;
        sbx_result *r = sbx_sandbox_execute_command(u->sb, &req, &err);
        if (!r) {
            snprintf(u->failure, sizeof u->failure, "exec: %s",
                     err ? sbx_error_get0_message(err) : "?");
            sbx_error_free(err);
            break;
        }
        size_t n;
        const char *out = sbx_result_get0_stdout(r, &n);
        if (sbx_result_get_exit_code(r) != 0 || n != strlen(want) || memcmp(out, want, n))
            snprintf(u->failure, sizeof u->failure, "round %d: exit %d stdout \"%.*s\"",
                     round, sbx_result_get_exit_code(r), (int)n, out);
        sbx_result_free(r);
        char *json = sbx_sandbox_session_state(u->sb, &err);
        if (!json) {
            snprintf(u->failure, sizeof u->failure, "session_state: %s",
                     err ? sbx_error_get0_message(err) : "?");
            sbx_error_free(err);
        }
        free(json);
    }
    return NULL;
}

Test(concurrency, one_sandbox_used_by_eight_threads)
{
    enum { N = 8 };
    sbx_sandbox *sb = tu_create(g_client, NULL);
    struct user u[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        memset(&u[i], 0, sizeof u[i]);
        u[i].sb = sb;
        u[i].index = i;
        cr_assert_eq(pthread_create(&t[i], NULL, user_main, &u[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++)
        cr_assert_eq(u[i].failure[0], '\0', "thread %d: %s", i, u[i].failure);
    /* Every thread's files are there, with its own bytes. */
    expect_sh(sb, "cd \"$SANDBOX_ROOT/tmp\" && ls t*-* | wc -l | tr -d ' '", "40\n");
    expect_sh(sb, "cd \"$SANDBOX_ROOT/tmp\" && cat t3-4 t7-0", "3.47.0");
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    assert_nothing_left();
}
