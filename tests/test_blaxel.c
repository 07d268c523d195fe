/*
 * test_blaxel.c — what only the blaxel backend does, through its contract
 * fake (tests/blaxel.sh starts tests/fakes/blaxel.py and runs this program
 * with SBX_TEST_BACKEND=blaxel and BL_API_URL pointing at it): every call
 * of both planes carries the workspace, the API version and the key; the
 * create names the sandbox by its create token, labels it, always sends a
 * ttl and derives memory from cpu (memory decides vCPU), refusing a cpu
 * that does not fit the memory; a file past 5 MB goes through the
 * multipart upload and reads back byte for byte; a sandbox on standby is
 * woken by the next command; list_owned follows the list's cursor to the
 * end; a sandbox the provider lost is gone (CASE-32); a command's output
 * reaches the output callback while it runs, and a stream that breaks off
 * mid-answer is followed to the command's end (or, when the process cannot
 * be followed, is a connection error naming it); an exec whose text is not
 * UTF-8 is refused before anything is sent (issue 16).
 */
#include "testutil.h"

#include <criterion/criterion.h>

#include <dirent.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>
#include <sbx/sbx.h>

static sbx_client *g_client;
static sbx_sandbox *g_sb;

static void setup(void)
{
    sbx_error *err = NULL;
    cr_assert_str_eq(tu_backend(), "blaxel", "run by tests/blaxel.sh");
    tu_fake_use("BL_API_URL");
    tu_fake_reset();
    tu_fake_post("/_fake/config", "{\"deploy_delay\": 0, \"page_size\": 0}");
    g_client = sbx_client_new("blaxel", &err);
    cr_assert_not_null(g_client, "sbx_client_new: %s", err ? sbx_error_get0_message(err) : "");
}

static void teardown(void)
{
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    sbx_client_free(g_client);
}

TestSuite(blaxel, .init = setup, .fini = teardown, .timeout = 90);

/* The body of the first logged request @method @path_re, parsed. */
static json_object *logged_body(const char *method, const char *path_re)
{
    json_object *log = tu_fake_log(), *out = NULL;
    regex_t rx;
    char *anchored = tu_strdup_printf("^%s$", path_re);
    cr_assert_eq(regcomp(&rx, anchored, REG_EXTENDED | REG_NOSUB), 0);
    free(anchored);
    for (size_t i = 0; i < json_object_array_length(log) && !out; i++) {
        json_object *e = json_object_array_get_idx(log, i);
        if (strcmp(tu_json_str(e, "method"), method) == 0
            && regexec(&rx, tu_json_str(e, "path"), 0, NULL, 0) == 0)
            out = json_tokener_parse(tu_json_str(e, "body"));
    }
    regfree(&rx);
    json_object_put(log);
    cr_assert_not_null(out, "no %s %s in the fake's log", method, path_re);
    return out;
}

Test(blaxel, every_call_carries_the_workspace_the_version_and_the_key)
{
    g_sb = tu_create(g_client, NULL);
    sbx_result *r = tu_sh(g_sb, "echo hi", 10);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    size_t n = json_object_array_length(log);
    cr_assert_eq(n, 2);     /* the create, the command */
    int data_plane = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(log, i), *h;
        cr_assert(json_object_object_get_ex(e, "headers", &h));
        cr_assert_str_eq(tu_json_str(h, "X-Blaxel-Workspace"), "sbx-test-ws", "%s",
                         tu_json_str(e, "path"));
        cr_assert_str_eq(tu_json_str(h, "Blaxel-Version"), "2026-04-28");
        cr_assert_str_eq(tu_json_str(e, "auth"), "Bearer <redacted>");
        data_plane += strncmp(tu_json_str(e, "path"), "/run/sbx-test-ws/sandboxes/", 27) == 0;
    }
    cr_assert_eq(data_plane, 1);
    json_object_put(log);
}

Test(blaxel, create_is_named_by_its_token_labelled_and_always_has_a_ttl)
{
    g_sb = tu_create(g_client, NULL);
    json_object *b = logged_body("POST", "/v0/sandboxes");
    const char *id = sbx_sandbox_get0_id(g_sb);
    json_object *meta = json_object_object_get(b, "metadata");
    json_object *labels = json_object_object_get(meta, "labels");
    json_object *rt = json_object_object_get(json_object_object_get(b, "spec"), "runtime");
    cr_assert_str_eq(tu_json_str(meta, "name"), id);
    cr_assert_eq(strncmp(id, "sbx-", 4), 0);
    cr_assert_str_eq(tu_json_str(labels, "sbx_backend"), "blaxel");
    cr_assert_str_eq(tu_json_str(labels, "sbx_create_token"), id);
    cr_assert_str_eq(tu_json_str(rt, "ttl"), "3600s");
    cr_assert_null(json_object_object_get(rt, "memory"));
    json_object_put(b);
}

Test(blaxel, cpu_asks_for_its_memory_and_the_lifetime_gets_a_margin)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 1.5, NULL), 0);
    cr_assert_eq(sbx_options_set_timeout_secs(o, 60.5, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    json_object *b = logged_body("POST", "/v0/sandboxes");
    json_object *rt = json_object_object_get(json_object_object_get(b, "spec"), "runtime");
    cr_assert_eq(json_object_get_int64(json_object_object_get(rt, "memory")), 3072);
    cr_assert_str_eq(tu_json_str(rt, "ttl"), "66s");
    json_object_put(b);
}

Test(blaxel, a_cpu_the_memory_does_not_give_is_a_configuration_error)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 2, NULL), 0);
    cr_assert_eq(sbx_options_set_memory_mb(o, 2048, NULL), 0);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "blaxel backend: cpu 2: Blaxel gives one vCPU per 2048 MB of memory: "
                     "memory_mb 2048 means cpu 1");
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "cpu");
    cr_assert_str_eq(sbx_error_get0_context(err, "memory_mb"), "2048");
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/v0/sandboxes", NULL, 0), 0);
    json_object_put(log);
}

/* Issue 16: what POST /process's JSON cannot carry (a byte that is not
 * UTF-8 in an argument, the shell command, an env value, the cwd) is
 * invalid_argument naming the part, before anything is sent; file paths go
 * in the URL, which carries any byte (testutil.c). */
Test(blaxel, text_json_cannot_carry_is_refused_before_sending)
{
    g_sb = tu_create(g_client, NULL);
    tu_json_text_refused("blaxel", g_sb, 0);
}

Test(blaxel, a_file_past_5_mb_goes_in_parts_and_reads_back_exactly)
{
    g_sb = tu_create(g_client, NULL);
    size_t n = (size_t)11 << 20;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)((i * 131 + (i >> 12)) & 0xff);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/tmp/big.bin", data, n, &err), 0,
                 "write_file: %s", err ? sbx_error_get0_message(err) : "");
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/run/.*/filesystem-multipart/initiate/tmp/big.bin",
                               NULL, 0), 1);
    cr_assert_eq(tu_fake_count(log, "PUT", "/run/.*/filesystem-multipart/[0-9a-f]+/part",
                               NULL, 0), 3);
    cr_assert_eq(tu_fake_count(log, "POST", "/run/.*/filesystem-multipart/[0-9a-f]+/complete",
                               NULL, 0), 1);
    cr_assert_eq(tu_fake_count(log, "PUT", "/run/.*/filesystem/tmp/big.bin", NULL, 0), 0);
    json_object_put(log);
    char *back = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, "/tmp/big.bin", &back, &len, &err), 0);
    cr_assert_eq(len, n);
    cr_assert_eq(memcmp(back, data, n), 0);
    free(back);
    free(data);
}

Test(blaxel, a_sandbox_on_standby_is_woken_by_the_next_command)
{
    g_sb = tu_create(g_client, NULL);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/tmp/keep.txt", "kept\n", 5, &err), 0);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/standby", sbx_sandbox_get0_id(g_sb));
    tu_fake_post(path, NULL);
    free(path);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 1);
    sbx_result *r = tu_sh(g_sb, "cat /tmp/keep.txt", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
    char *info = NULL;
    path = tu_strdup_printf("/_fake/sandbox/%s", sbx_sandbox_get0_id(g_sb));
    cr_assert_eq(tu_fake_http("GET", path, NULL, NULL, &info), 200);
    free(path);
    json_object *j = json_tokener_parse(info);
    cr_assert_str_eq(tu_json_str(j, "state"), "RUNNING");
    cr_assert_eq(json_object_get_int(json_object_object_get(j, "wakes")), 1);
    json_object_put(j);
    free(info);
}

static int note_id(const sbx_owned_sandbox *o, void *ud)
{
    const char **want = ud;
    for (int i = 0; i < 2; i++)
        if (strcmp(o->id, want[2 * i]) == 0 && strcmp(o->create_token, want[2 * i]) == 0)
            want[2 * i + 1] = "found";
    return 0;
}

Test(blaxel, list_owned_follows_the_cursor_to_the_end)
{
    g_sb = tu_create(g_client, NULL);
    sbx_sandbox *other = tu_create(g_client, NULL);
    tu_fake_post("/_fake/config", "{\"page_size\": 1}");
    tu_fake_reset();
    const char *want[4] = { sbx_sandbox_get0_id(g_sb), NULL, sbx_sandbox_get0_id(other), NULL };
    sbx_error *err = NULL;
    int rc = sbx_client_list_owned(g_client, note_id, want, &err);
    cr_assert_geq(rc, 2, "list_owned: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_str_eq(want[1] ? want[1] : "missing", "found");
    cr_assert_str_eq(want[3] ? want[3] : "missing", "found");
    json_object *log = tu_fake_log();
    cr_assert_geq(tu_fake_count(log, "GET", "/v0/sandboxes", NULL, 0), 2);
    json_object_put(log);
    cr_assert_eq(sbx_client_destroy_by_id(g_client, sbx_sandbox_get0_id(other), &err), 0);
    sbx_sandbox_free(other);
}

Test(blaxel, a_sandbox_the_provider_lost_is_gone)
{
    g_sb = tu_create(g_client, NULL);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/vanish", sbx_sandbox_get0_id(g_sb));
    tu_fake_post(path, NULL);
    free(path);
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_shell(g_sb, "echo hi", &err);
    cr_assert_null(r);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 0);
}

/* The live sandboxes at the fake (its control route, no credential). */
static size_t fake_live(void)
{
    return tu_fake_array_length("/_fake/sandboxes", NULL, NULL);
}

/* CASE-20: the provider makes the sandbox after the create call gave up;
 * the plugin finds it by its name (the create token) and label and deletes
 * it. The call timeout (sbx_client_set_call_timeout) bounds the create in
 * both plugin modes. */
Test(blaxel, a_create_the_provider_finishes_after_the_timeout_is_deleted)
{
    size_t n0 = fake_live();
    tu_fake_post("/_fake/faults", "{\"method\":\"POST\",\"path\":\"^/v0/sandboxes$\","
                 "\"action\":\"pass\",\"delay\":2}");
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 1.0, NULL), 0);
    double t0 = tu_now();
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(g_client, NULL, &err);
    double dt = tu_now() - t0;
    cr_assert_null(sb);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_TIMEOUT, "%s", sbx_error_get0_message(err));
    cr_assert(dt <= 1.5, "the create returned after %.2f s", dt);
    sbx_error_free(err);
    /* The case's bound: within 10 s the sandbox the provider made late is
     * deleted (once), and its live list is as before. The fake logs a
     * request as it arrives, before handling it: both are waited for. */
    int deletes = 0;
    size_t live = 0;
    for (int i = 0; i < 100; i++) {
        usleep(100000);
        json_object *l = tu_fake_log();
        deletes = tu_fake_count(l, "DELETE", "/v0/sandboxes/sbx-[0-9a-f]+", NULL, 0);
        json_object_put(l);
        if (deletes > 0 && (live = fake_live()) == n0)
            break;
    }
    cr_assert_eq(deletes, 1, "the late sandbox was not deleted within 10 s");
    cr_assert_eq(live, n0);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/v0/sandboxes", NULL, 0), 1);
    json_object_put(log);
}

/* A create answered 408 (the provider's own time ran out) is a timeout,
 * never the caller's configuration; the create is sent once. */
Test(blaxel, a_create_answered_408_is_a_timeout)
{
    tu_fake_assert_create_answered(g_client, "^/v0/sandboxes$", 408, SBX_ERROR_TIMEOUT);
}

/* The data plane answers a directory with its JSON listing whatever the
 * Accept header asks: reading one is invalid_argument, and none of the
 * listing reaches the caller. */
Test(blaxel, reading_a_directory_is_refused_and_writes_nothing)
{
    g_sb = tu_create(g_client, NULL);
    sbx_error *err = NULL;
    char *data = NULL;
    size_t len = 7;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, "/tmp", &data, &len, &err), -1);
    cr_assert_null(data);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(sbx_error_get0_message(err), "\"/tmp\" is a directory");
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), "/tmp");
    sbx_error_free(err);
}

/* A process stream that ends with an "error" line instead of its result is
 * an error naming the provider's message, never exit 0. */
Test(blaxel, a_stream_ending_in_an_error_line_is_an_error)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_post("/_fake/config", "{\"stream_error\": \"process supervisor lost\"}");
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_shell(g_sb, "echo hi", &err);
    cr_assert_null(r, "exit %d", r ? sbx_result_get_exit_code(r) : -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_EXECUTION_FAILED);
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "blaxel: the command's stream said: process supervisor lost");
    sbx_error_free(err);
    /* The sandbox runs on. */
    r = tu_sh(g_sb, "echo after", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "after\n");
    sbx_result_free(r);
}

/* ------------------------------------------------------------ live output */

/* Where sandbox path @inside (absolute) of @sb is on this host: under the
 * root the fake reports for it. The caller frees it. */
static char *host_path(sbx_sandbox *sb, const char *inside)
{
    char *info = NULL;
    char *path = tu_strdup_printf("/_fake/sandbox/%s", sbx_sandbox_get0_id(sb));
    cr_assert_eq(tu_fake_http("GET", path, NULL, NULL, &info), 200);
    free(path);
    json_object *j = json_tokener_parse(info);
    cr_assert_not_null(j, "%s", info);
    char *out = tu_strdup_printf("%s%s", tu_json_str(j, "root"), inside);
    json_object_put(j);
    free(info);
    return out;
}


/* The command prints a line, then waits (up to 10 s) for a file that only
 * the output callback makes, on seeing that line: "second" shows the line
 * reached the callback while the command ran ("never" when output came
 * only at its end). */
Test(blaxel, output_reaches_the_callback_while_the_command_runs)
{
    g_sb = tu_create(g_client, NULL);
    char *go = host_path(g_sb, "/tmp/go");
    tu_assert_output_is_live(g_sb, go, "/tmp/go");
    free(go);
}

/* The process stream's connection is lost after its first line: the
 * plugin follows the process (GET /process/{name}) to its end, and the
 * result is whole and exact. */
Test(blaxel, a_stream_that_breaks_off_is_followed_to_the_commands_end)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    tu_fake_post("/_fake/config", "{\"stream_drop\": true}");
    sbx_result *r = tu_sh(g_sb, "echo one; sleep 0.5; echo two; printf 'e\\377' >&2; exit 3",
                          30);
    tu_assert_exit(r, 3);
    tu_assert_stdout(r, "one\ntwo\n");
    size_t n = 0;
    const char *e = sbx_result_get0_stderr(r, &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(memcmp(e, "e\377", 2), 0);
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", ".*/process", NULL, 0), 1);
    cr_assert_geq(tu_fake_count(log, "GET", ".*/process/sbx-exec-[0-9a-f]+", NULL, 0), 1);
    json_object_put(log);
    json_object *body = logged_body("POST", ".*/process");
    const char *name = tu_json_str(body, "name");
    cr_assert(name && strncmp(name, "sbx-exec-", 9) == 0, "name %s", name ? name : "(none)");
    json_object_put(body);
}

/* The stream breaks off and the process cannot be followed (the sandbox
 * API answers 404 for it): a connection error naming the process, never a
 * made-up exit code; the sandbox runs on. */
Test(blaxel, a_stream_that_breaks_off_and_cannot_be_followed_is_an_error)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_post("/_fake/config", "{\"stream_drop\": true}");
    tu_fake_post("/_fake/faults", "{\"method\":\"GET\",\"path\":\"/process/sbx-exec-\","
                 "\"times\":-1,\"status\":404,\"body\":{\"error\":\"process not found\"}}");
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_shell(g_sb, "echo one; sleep 0.5; echo two", &err);
    cr_assert_null(r, "exit %d", r ? sbx_result_get_exit_code(r) : -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONNECTION);
    const char *msg = sbx_error_get0_message(err);
    cr_assert(strstr(msg, "blaxel: the command's stream broke off and its process sbx-exec-")
              == msg, "%s", msg);
    cr_assert(strstr(msg, " could not be followed: "), "%s", msg);
    sbx_error_free(err);
    tu_fake_http("DELETE", "/_fake/faults", NULL, NULL, NULL);
    r = tu_sh(g_sb, "echo after", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "after\n");
    sbx_result_free(r);
}

/* A command whose output nobody follows is one request: its output comes
 * in the shell's report, exact (a NUL, a byte that is not UTF-8, "%"),
 * and its files are gone with it; with stdin and with an output too large
 * to report, too. */
Test(blaxel, a_command_nobody_follows_is_one_request_and_leaves_nothing)
{
    g_sb = tu_create(g_client, NULL);
    char *tmp = host_path(g_sb, "/tmp");
    tu_fake_reset();
    sbx_result *r = tu_sh(g_sb, "printf 'a\\0b\\377%%\\n'; printf 'e\\001' >&2; exit 5", 30);
    tu_assert_exit(r, 5);
    tu_assert_stdout_bytes(r, "a\0b\377%\n", 6);
    tu_assert_stderr_bytes(r, "e\001", 2);
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 1);
    cr_assert_eq(tu_fake_count(log, "POST", ".*/process", NULL, 0), 1);
    json_object_put(log);
    /* With stdin (its file uploaded first), and an output past the
     * report's bound (read from its file): nothing left either. */
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.shell = "cat; head -c 70000 /dev/zero | tr '\\0' x >&2";
    rq.stdin_data = "in\377";
    rq.stdin_len = 3;
    rq.timeout_secs = 30;
    r = tu_exec(g_sb, &rq);
    tu_assert_exit(r, 0);
    tu_assert_stdout_bytes(r, "in\377", 3);
    size_t n = 0;
    const char *e = sbx_result_get0_stderr(r, &n);
    cr_assert_eq(n, 70000);
    cr_assert_eq(e[0], 'x');
    cr_assert_eq(e[69999], 'x');
    sbx_result_free(r);
    r = tu_sh(g_sb, "head -c 70000 /dev/zero", 30);
    tu_assert_exit(r, 0);
    e = sbx_result_get0_stdout(r, &n);
    cr_assert_eq(n, 70000);
    cr_assert_eq(e[0], 0);
    cr_assert_eq(e[69999], 0);
    sbx_result_free(r);
    DIR *d = opendir(tmp);
    cr_assert_not_null(d, "%s", tmp);
    int left = 0;
    for (struct dirent *de; (de = readdir(d));)
        left += strncmp(de->d_name, ".sbx-exec-", 10) == 0;
    closedir(d);
    cr_assert_eq(left, 0);
    free(tmp);
}
