/*
 * test_modal.c — what the modal backend does beyond the backend-neutral
 * suites, through the Modal gRPC contract fake (tests/fakes/modal.py,
 * started by tests/modal.sh, which sets MODAL_SERVER_URL to its gRPC port
 * and SBX_MODAL_FAKE_URL to its test routes): RESOURCE_EXHAUSTED is
 * retried with backoff and, past the retries, rate_limited (CASE-19); a
 * create answered after the call's deadline leaves no sandbox (CASE-20); a
 * sandbox that vanished is a distinct "gone" error (CASE-32); a bad token
 * secret is an authentication error that names no secret (CASE-36); the
 * creating process's environment never reaches the sandbox (CASE-48); a
 * quiet command outlives any fixed stream timeout, and an output stream cut
 * mid-output, by the fake or by an idle reaper (tests/fakes/idlereaper.py)
 * before the command router, is read on from its offset without starting
 * the command again (CASE-52); an expired command-router JWT is fetched again; UNAVAILABLE is
 * retried only where safe; the call's bound travels as grpc-timeout; calls
 * fail over to a second URL when the first does not answer; the token pair
 * comes from ~/.modal.toml's profile when the environment has none; cpu,
 * memory_mb and gpu reach Resources as the Go SDK sends them; the auth
 * token of AuthTokenGet rides on every unary control call; list_owned and
 * destroy_by_id take only what this library made, and sbx gc reaps a
 * create whose answer was lost; a port given at create is reached through
 * its TLS tunnel; over TLS the channels re-use their connections; text
 * a protobuf string cannot carry is refused before anything is sent
 * (issue 16).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE     /* memmem */
#endif
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static sbx_client *g_client;
static sbx_sandbox *g_sb;

static void setup(void)
{
    tu_fake_use("SBX_MODAL_FAKE_URL");
    tu_fake_reset();
    sbx_error *err = NULL;
    g_client = sbx_client_new("modal", &err);
    cr_assert_not_null(g_client, "%s", err ? sbx_error_get0_message(err) : "");
    g_sb = NULL;
}

static void teardown(void)
{
    tu_reaper_stop();
    tu_fake_reset();
    tu_fake_post("/_fake/router_url", "{\"url\":\"\"}");
    tu_fake_post("/_fake/jwt", "{\"ttl\":3600}");
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
    }
    sbx_client_free(g_client);
}

TestSuite(modal, .init = setup, .fini = teardown, .timeout = 90);

#define CTL "/modal.client.ModalClient/"
#define ROUTER "/modal.task_command_router.TaskCommandRouter/"

/* How many calls of @method (a full gRPC path) the fake's log holds; their
 * times in @t (at most @tmax). */
static int calls(const char *method, double *t, size_t tmax)
{
    json_object *log = tu_fake_log();
    int n = tu_fake_count(log, "POST", method, t, tmax);
    json_object_put(log);
    return n;
}

/* The number of running sandboxes at the fake. */
static size_t fake_live(void)
{
    return tu_fake_array_length("/_fake/sandboxes", NULL, NULL);
}

/* ------------------------------------------------------------ CASE-19 */

/* SandboxCreate answered RESOURCE_EXHAUSTED twice: sent three times, each
 * re-send after a backoff of at least 0.5 s (no tight loop), and the create
 * succeeds. */
/* Issue 16: what a protobuf string field cannot carry (a byte that is not
 * UTF-8 in an argument, the shell command, an env value, the cwd, all in
 * TaskExecStart or the env's Secret; a path of write_file, read_file or
 * list_files, in their helper's command) is invalid_argument naming the
 * part, before anything is sent (testutil.c). */
Test(modal, text_protobuf_cannot_carry_is_refused_before_sending)
{
    g_sb = tu_create(g_client, NULL);
    tu_json_text_refused("modal", g_sb, TU_TEXT_WRITE | TU_TEXT_READ | TU_TEXT_LIST
                                        | TU_TEXT_PROTOBUF);
}

Test(modal, case19_resource_exhausted_is_retried_with_backoff)
{
    tu_fake_post("/_fake/faults", "{\"path\":\"SandboxCreate$\",\"code\":8,\"times\":2,"
                                  "\"message\":\"too many sandboxes\"}");
    g_sb = tu_create(g_client, NULL);
    double t[3] = { 0, 0, 0 };
    cr_assert_eq(calls(CTL "SandboxCreate", t, 3), 3);
    cr_assert(t[1] - t[0] >= 0.5, "the first re-send came %.3f s after the refusal", t[1] - t[0]);
    cr_assert(t[2] - t[1] >= 0.5, "the second re-send came %.3f s after the refusal",
              t[2] - t[1]);
    sbx_result *r = tu_sh(g_sb, "echo after", 10);
    tu_assert_stdout(r, "after\n");
    sbx_result_free(r);
}

/* With retries 0: rate_limited after exactly one SandboxCreate, retryable,
 * the gRPC status in the context. */
Test(modal, case19_resource_exhausted_without_retries_is_rate_limited)
{
    sbx_client_free(g_client);
    sbx_error *err = NULL;
    g_client = sbx_client_new_with_config("modal", SBX_PLUGIN_MODE_DEFAULT, "{\"retries\":0}", &err);
    cr_assert_not_null(g_client, "%s", err ? sbx_error_get0_message(err) : "");
    tu_fake_post("/_fake/faults", "{\"path\":\"SandboxCreate$\",\"code\":8,\"times\":-1,"
                                  "\"message\":\"too many sandboxes\"}");
    sbx_sandbox *sb = sbx_sandbox_create(g_client, NULL, &err);
    cr_assert_null(sb);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_RATE_LIMITED, "%s",
                 sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "create the sandbox: too many sandboxes (gRPC RESOURCE_EXHAUSTED)");
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    cr_assert_str_eq(sbx_error_get0_backend(err), "modal");
    cr_assert_str_eq(sbx_error_get0_op(err), "create");
    sbx_error_free(err);
    cr_assert_eq(calls(CTL "SandboxCreate", NULL, 0), 1);
}

/* UNAVAILABLE on a call that is safe to repeat (SandboxWait, is_alive's
 * look) is sent again after a backoff; on SandboxCreate, which is not, it
 * fails at once as a connection error whose outcome is unknown. */
Test(modal, unavailable_is_retried_only_where_safe)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    tu_fake_post("/_fake/faults", "{\"path\":\"SandboxWait$\",\"code\":14,\"times\":2}");
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 1, "%s", err ? sbx_error_get0_message(err) : "");
    double t[3] = { 0, 0, 0 };
    cr_assert_eq(calls(CTL "SandboxWait", t, 3), 3);
    cr_assert(t[1] - t[0] >= 0.5, "the first re-send came %.3f s after UNAVAILABLE", t[1] - t[0]);

    tu_fake_reset();
    tu_fake_post("/_fake/faults", "{\"path\":\"SandboxCreate$\",\"code\":14,"
                                  "\"message\":\"backend unavailable\"}");
    sbx_sandbox *sb = sbx_sandbox_create(g_client, NULL, &err);
    cr_assert_null(sb);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONNECTION, "%s", sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "create the sandbox: backend unavailable (gRPC UNAVAILABLE)");
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN);
    cr_assert_str_eq(sbx_error_get0_context(err, "grpc_status"), "14");
    sbx_error_free(err);
    cr_assert_eq(calls(CTL "SandboxCreate", NULL, 0), 1);
}

/* The call's bound travels as grpc-timeout: a call timeout of 20 s reaches
 * the fake as a deadline of at most 20 s (and more than 15: the create's
 * first calls took less than that), in both plugin modes. */
Test(modal, the_call_bound_is_sent_as_grpc_timeout)
{
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 20.0, NULL), 0);
    g_sb = tu_create(g_client, NULL);
    json_object *log = tu_fake_log(), *v = NULL;
    int found = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i);
        const char *p = tu_json_str(e, "path");
        if (p && strcmp(p, CTL "SandboxCreate") == 0) {
            found = json_object_object_get_ex(e, "timeout_s", &v);
            break;
        }
    }
    cr_assert(found, "no SandboxCreate in the log");
    cr_assert_not_null(v, "no grpc-timeout came");
    double left = json_object_get_double(v);
    cr_assert(left > 15.0 && left <= 20.0, "grpc-timeout left %.3f s", left);
    json_object_put(log);
}

/* The first server does not answer (nothing listens on 127.0.0.1:1): the
 * calls go to the failover URL, and stay there. */
Test(modal, calls_fail_over_when_the_first_server_does_not_answer)
{
    sbx_client_free(g_client);
    char *cfg = tu_strdup_printf("{\"server_url\":\"http://127.0.0.1:1\",\"failover_url\":\"%s\"}",
                                 getenv("MODAL_SERVER_URL"));
    sbx_error *err = NULL;
    g_client = sbx_client_new_with_config("modal", SBX_PLUGIN_MODE_DEFAULT, cfg, &err);
    free(cfg);
    cr_assert_not_null(g_client, "%s", err ? sbx_error_get0_message(err) : "");
    g_sb = tu_create(g_client, NULL);
    sbx_result *r = tu_sh(g_sb, "echo over", 10);
    tu_assert_stdout(r, "over\n");
    sbx_result_free(r);
    cr_assert_eq(calls(CTL "SandboxCreate", NULL, 0), 1);
}

/* ------------------------------------------------------------ CASE-20 */

/* SandboxCreate answered 4 s late, the call bounded to 1 s (in both plugin
 * modes): a timeout within 1.5 s, and the sandbox the fake made meanwhile
 * is found by its create token (SandboxList by tag) and terminated. */
Test(modal, case20_late_create_is_terminated)
{
    size_t n0 = fake_live();
    tu_fake_post("/_fake/faults", "{\"path\":\"SandboxCreate$\",\"action\":\"pass\","
                                  "\"delay\":4}");
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 1.0, NULL), 0);
    double t0 = tu_now();
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(g_client, NULL, &err);
    double dt = tu_now() - t0;
    cr_assert_null(sb);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_TIMEOUT, "%s", sbx_error_get0_message(err));
    cr_assert(dt <= 1.5, "the create returned after %.2f s", dt);
    sbx_error_free(err);
    /* The late sandbox appears 4 s after the create began; the reaper
     * finds it by its create token and terminates it within 10 s. */
    int terminated = 0;
    for (int i = 0; i < 100 && !(terminated = calls(CTL "SandboxTerminate", NULL, 0)); i++)
        usleep(100000);
    cr_assert_eq(terminated, 1, "the late sandbox was not terminated");
    cr_assert_eq(fake_live(), n0);
}

/* ------------------------------------------------------------ CASE-32 */

/* The provider dropped the sandbox: not_found with reason "gone", not
 * retryable, and at once for the next call; destroy succeeds. */
Test(modal, case32_vanished_sandbox_is_gone)
{
    g_sb = tu_create(g_client, NULL);
    sbx_result *r = tu_sh(g_sb, "echo hi", 10);
    tu_assert_stdout(r, "hi\n");
    sbx_result_free(r);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/vanish", sbx_sandbox_get0_id(g_sb));
    tu_fake_post(path, NULL);
    free(path);
    tu_fake_reset();
    for (int i = 0; i < 2; i++) {
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.shell = i ? "echo third" : "echo again";
        sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
        cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
        cr_assert_eq(sbx_error_is_retryable(err), 0);
        sbx_error_free(err);
    }
    /* The first exec: its TaskExecStart (NOT_FOUND) and one confirming
     * SandboxGetTaskId; the second sent nothing. */
    json_object *log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 2, "%s", json_object_to_json_string(log));
    cr_assert_eq(tu_fake_count(log, "POST", ROUTER "TaskExecStart", NULL, 0), 1);
    cr_assert_eq(tu_fake_count(log, "POST", CTL "SandboxGetTaskId", NULL, 0), 1);
    json_object_put(log);
    /* A file call on it fails at once the same way. */
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/tmp/x", "x", 1, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND, "%s", sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    sbx_error_free(err);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
}

/* ------------------------------------------------------------ CASE-36 */

/* A token secret the fake refuses: authentication, and the secret is in no
 * message, context or log line. */
Test(modal, case36_bad_secret_is_authentication_and_never_echoed)
{
    static const char secret[] = "modal_TESTSECRET_0123456789abcdef";
    const char *old = getenv("MODAL_TOKEN_SECRET");
    char *keep = old ? strdup(old) : NULL;
    setenv("MODAL_TOKEN_SECRET", secret, 1);
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new("modal", &err);
    if (keep)
        setenv("MODAL_TOKEN_SECRET", keep, 1);
    free(keep);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
    cr_assert_null(sb);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_AUTHENTICATION, "%s",
                 sbx_error_get0_message(err));
    char *text = sbx_error_to_string(err);
    cr_assert_not_null(text);
    cr_assert_null(strstr(text, "TESTSECRET"), "%s", text);
    free(text);
    sbx_error_free(err);
    sbx_client_free(c);
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", "/_fake/log", NULL, NULL, &body), 200);
    cr_assert_null(strstr(body, "TESTSECRET"), "the fake's log holds the secret");
    cr_assert_not_null(strstr(body, "x-modal-token-secret"));
    free(body);
}

/* ------------------------------------------------------------ CASE-48 */

/* Canaries in this process's environment never reach the sandbox or the
 * provider; the create's env does. */
Test(modal, case48_creator_environment_never_reaches_the_sandbox)
{
    /* None of the canaries is modal's own credential. */
    tu_fake_assert_env_canaries("modal", NULL);
}

/* ------------------------------------------------------------ CASE-52 */

/* A command quiet for 12 s, longer than the transport's one fixed limit
 * (10 s to connect): it is not cut, and it ran once. */
Test(modal, case52_a_quiet_command_is_not_cut_slow)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "sleep 12; echo done", 60);
    double dt = tu_now() - t0;
    tu_assert_stdout(r, "done\n");
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    cr_assert(dt >= 12.0 && dt < 16.0, "the command took %.2f s", dt);
    cr_assert_eq(calls(ROUTER "TaskExecStart", NULL, 0), 1);
}

/* The stdout stream is cut after 3 bytes, twice: it is read on from its
 * offset each time (three TaskExecStdioRead of stdout, one of stderr), the
 * output is whole, and the command started once. */
Test(modal, case52_a_cut_stream_is_read_on_from_its_offset)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    tu_fake_post("/_fake/faults", "{\"path\":\"TaskExecStdioRead#stdout$\",\"action\":\"cut\","
                                  "\"bytes\":3,\"times\":2}");
    sbx_result *r = tu_sh(g_sb, "printf 'abcdefgh'; sleep 0.5; printf 'ijkl\\n'", 30);
    tu_assert_stdout(r, "abcdefghijkl\n");
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    cr_assert_eq(calls(ROUTER "TaskExecStart", NULL, 0), 1);
    cr_assert_eq(calls(ROUTER "TaskExecStdioRead", NULL, 0), 4);
}

/* CASE-52 A: an idle reaper (5 s) between the plugin and the command
 * router: the streams of a command quiet for 12 s are cut by it, and read
 * on from their offsets; the command ran once and its output is whole. */
Test(modal, case52_streams_cut_by_an_idle_reaper_are_read_on_slow)
{
    const char *rp = getenv("SBX_MODAL_ROUTER_PORT");
    cr_assert_not_null(rp, "SBX_MODAL_ROUTER_PORT is not set: run tests/modal.sh");
    int port = tu_reaper_start(atoi(rp), 5);
    char *b = tu_strdup_printf("{\"url\":\"http://127.0.0.1:%d\"}", port);
    tu_fake_post("/_fake/router_url", b);
    free(b);
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "echo begin; sleep 12; echo done", 60);
    double dt = tu_now() - t0;
    tu_assert_stdout(r, "begin\ndone\n");
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    cr_assert(dt >= 12.0 && dt < 16.0, "the command took %.2f s", dt);
    cr_assert_eq(calls(ROUTER "TaskExecStart", NULL, 0), 1);
    cr_assert_geq(calls(ROUTER "TaskExecStdioRead", NULL, 0), 3);
    cr_assert_geq(tu_reaper_stop(), 1);
}

/* ------------------------------------------------------------ JWT */

/* Every JWT the fake handed out expires: the next command's router call is
 * refused, a new JWT is fetched once, and the command runs once. */
Test(modal, an_expired_jwt_is_fetched_again)
{
    g_sb = tu_create(g_client, NULL);
    sbx_result *r = tu_sh(g_sb, "echo one", 10);
    tu_assert_stdout(r, "one\n");
    sbx_result_free(r);
    tu_fake_post("/_fake/jwt/expire", NULL);
    tu_fake_reset();
    r = tu_sh(g_sb, "echo two", 10);
    tu_assert_stdout(r, "two\n");
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    cr_assert_eq(calls(CTL "TaskGetCommandRouterAccess", NULL, 0), 1);
    cr_assert_eq(calls(ROUTER "TaskExecStart", NULL, 0), 2);   /* refused, then sent again */
}

/* ------------------------------------------------------------ ~/.modal.toml */

/* Makes a client with no MODAL_TOKEN_* in the environment, MODAL_CONFIG_PATH
 * naming @toml and MODAL_PROFILE @profile (NULL: unset); the environment is
 * put back afterwards. */
static sbx_client *client_from_toml(const char *toml, const char *profile)
{
    const char *names[] = { "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_CONFIG_PATH",
                            "MODAL_PROFILE" };
    char *keep[4];
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(names[i]);
        keep[i] = v ? strdup(v) : NULL;
    }
    unsetenv("MODAL_TOKEN_ID");
    unsetenv("MODAL_TOKEN_SECRET");
    setenv("MODAL_CONFIG_PATH", toml, 1);
    if (profile)
        setenv("MODAL_PROFILE", profile, 1);
    else
        unsetenv("MODAL_PROFILE");
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new("modal", &err);
    for (int i = 0; i < 4; i++) {
        if (keep[i])
            setenv(names[i], keep[i], 1);
        else
            unsetenv(names[i]);
        free(keep[i]);
    }
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    return c;
}

/* The token pair comes from the config file's active profile, or from the
 * one MODAL_PROFILE names. */
Test(modal, credentials_come_from_the_modal_toml_profile)
{
    char path[] = "/tmp/sbx-modal-toml-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    static const char toml[] =
        "[other]\n"
        "token_id = \"ak-other\"\n"
        "token_secret = \"as-wrong-secret\"\n"
        "\n"
        "[main]\n"
        "token_id = 'ak-main'\n"
        "token_secret = \"sbx-test-dummy-key\"\n"
        "active = true\n";
    cr_assert_eq(write(fd, toml, sizeof toml - 1), (ssize_t)(sizeof toml - 1));
    close(fd);
    sbx_client *c = client_from_toml(path, NULL);
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
    cr_assert_not_null(sb, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    json_object *log = tu_fake_log(), *auth, *id;
    json_object *first = json_object_array_get_idx(log, 0);
    cr_assert(json_object_object_get_ex(first, "auth", &auth));
    cr_assert(json_object_object_get_ex(auth, "x-modal-token-id", &id));
    cr_assert_str_eq(json_object_get_string(id), "ak-main");
    json_object_put(log);

    c = client_from_toml(path, "other");
    sb = sbx_sandbox_create(c, NULL, &err);
    cr_assert_null(sb);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_AUTHENTICATION, "%s",
                 sbx_error_get0_message(err));
    sbx_error_free(err);
    sbx_client_free(c);
    unlink(path);
}

/* ------------------------------------------------------------ stdin */

/* A command that ends without reading its stdin (8 MiB given): it ends
 * with its own status, and the fake is not hurt by writes to a pipe no one
 * reads any more (the next command runs). */
Test(modal, stdin_to_a_command_that_does_not_read_it)
{
    g_sb = tu_create(g_client, NULL);
    size_t n = (size_t)8 << 20;
    char *data = malloc(n);
    cr_assert_not_null(data);
    memset(data, 'x', n);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "exit 7";
    req.stdin_data = data;
    req.stdin_len = n;
    req.timeout_secs = 30;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 7);
    sbx_result_free(r);
    free(data);
    r = tu_sh(g_sb, "echo still here", 10);
    tu_assert_stdout(r, "still here\n");
    sbx_result_free(r);
}

/* ------------------------------------------------------------ resources */

/* The fake's view of sandbox @id (GET /_fake/sandbox/ID): json_object_put() it. */
static json_object *fake_sandbox(const char *id)
{
    char *path = tu_strdup_printf("/_fake/sandbox/%s", id);
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", path, NULL, NULL, &body), 200, "%s", path);
    json_object *j = json_tokener_parse(body);
    cr_assert_not_null(j, "%s", body);
    free(body);
    free(path);
    return j;
}

static long long fake_resource(json_object *sb, const char *key)
{
    json_object *r = NULL, *v = NULL;
    cr_assert(json_object_object_get_ex(sb, "resources", &r));
    cr_assert(json_object_object_get_ex(r, key, &v), "no resources.%s", key);
    return (long long)json_object_get_int64(v);
}

/* cpu (vCPUs) and memory_mb reach SandboxCreate's Resources as the Go SDK
 * sends a request with its limit: 1.5 vCPUs are 0.75 physical cores (750
 * milli-CPU, request and limit), 384 MiB memory_mb and memory_mb_max; the
 * GPU as its type and count. */
Test(modal, cpu_memory_and_gpu_reach_the_resources_as_request_and_limit)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 1.5, NULL), 0);
    cr_assert_eq(sbx_options_set_memory_mb(o, 384, NULL), 0);
    cr_assert_eq(sbx_options_set_gpu(o, "a100-80gb:2", NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    json_object *sb = fake_sandbox(sbx_sandbox_get0_id(g_sb));
    cr_assert_eq(fake_resource(sb, "milli_cpu"), 750);
    cr_assert_eq(fake_resource(sb, "milli_cpu_max"), 750);
    cr_assert_eq(fake_resource(sb, "memory_mb"), 384);
    cr_assert_eq(fake_resource(sb, "memory_mb_max"), 384);
    json_object *r = NULL, *v = NULL;
    cr_assert(json_object_object_get_ex(sb, "resources", &r));
    cr_assert(json_object_object_get_ex(r, "gpu_type", &v));
    cr_assert_str_eq(json_object_get_string(v), "A100-80GB");
    cr_assert_eq(fake_resource(sb, "gpu_count"), 2);
    json_object_put(sb);
}

/* Without cpu or memory_mb set, no request and no limit are sent (Modal's
 * defaults); the backend option memory_mb is a request only, and with
 * memory_mb too it is refused naming both. */
Test(modal, unset_limits_send_nothing_and_the_backend_option_is_a_request)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_backend_options(o, "{\"memory_mb\": 2048}", NULL), 0);
    g_sb = tu_create(g_client, o);
    json_object *sb = fake_sandbox(sbx_sandbox_get0_id(g_sb));
    cr_assert_eq(fake_resource(sb, "milli_cpu"), 0);
    cr_assert_eq(fake_resource(sb, "milli_cpu_max"), 0);
    cr_assert_eq(fake_resource(sb, "memory_mb"), 2048);
    cr_assert_eq(fake_resource(sb, "memory_mb_max"), 0);
    json_object_put(sb);
    cr_assert_eq(sbx_options_set_memory_mb(o, 512, NULL), 0);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "memory_mb");
    cr_assert(strstr(sbx_error_get0_message(err), "backend option memory_mb"), "%s",
              sbx_error_get0_message(err));
    sbx_error_free(err);
    sbx_options_free(o);
}

/* ------------------------------------------------------------ auth token */

/* Every unary control call carries the token AuthTokenGet gave (the fake
 * refuses one without it); it is fetched once, and again only when it is
 * within five minutes of its exp. */
Test(modal, the_auth_token_is_fetched_once_and_again_near_its_expiry)
{
    g_sb = tu_create(g_client, NULL);
    cr_assert_eq(calls(CTL "AuthTokenGet", NULL, 0), 1);
    json_object *log = tu_fake_log();
    int ctl = 0, with = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *a = NULL;
        const char *path = tu_json_str(e, "path");
        if (!path || strncmp(path, CTL, strlen(CTL)) != 0 || strstr(path, "AuthTokenGet")
            || strstr(path, "ImageJoinStreaming"))
            continue;
        ctl++;
        if (json_object_object_get_ex(e, "auth", &a) && tu_json_str(a, "x-modal-auth-token"))
            with++;
    }
    json_object_put(log);
    cr_assert_geq(ctl, 4, "only %d control calls", ctl);
    cr_assert_eq(with, ctl, "%d of %d control calls carried the auth token", with, ctl);
    /* A token of 200 s is within the refresh window from the start: each
     * call of a new client fetches a new one. */
    sbx_error *err = NULL;
    tu_fake_post("/_fake/auth", "{\"ttl\":200}");
    sbx_client *c2 = sbx_client_new("modal", &err);
    cr_assert_not_null(c2, "%s", err ? sbx_error_get0_message(err) : "");
    char *state = sbx_sandbox_session_state(g_sb, &err);
    cr_assert_not_null(state);
    tu_fake_reset();
    sbx_sandbox *again = sbx_sandbox_resume(c2, state, &err);
    cr_assert_not_null(again, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_is_alive(again, NULL), 1);
    cr_assert_eq(sbx_sandbox_is_alive(again, NULL), 1);
    int waits = calls(CTL "SandboxWait", NULL, 0), tasks = calls(CTL "SandboxGetTaskId", NULL, 0);
    cr_assert_eq(waits, 2);
    cr_assert_geq(tasks, 1);
    cr_assert_eq(calls(CTL "AuthTokenGet", NULL, 0), waits + tasks);
    /* A fetch that fails while the old token is still valid sends the old
     * one, and the call succeeds. */
    tu_fake_post("/_fake/faults", "{\"path\":\"AuthTokenGet$\",\"code\":7,\"times\":1}");
    cr_assert_eq(sbx_sandbox_is_alive(again, &err), 1, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(calls(CTL "SandboxWait", NULL, 0), 3);
    tu_fake_post("/_fake/auth", "{\"ttl\":3600}");
    sbx_sandbox_free(again);
    sbx_client_free(c2);
    free(state);
}

/* ------------------------------------------------------------ list_owned */

typedef struct owned_seen {
    int n;
    char id[128];
    char token[80];
    double created_at, expires_at;
} owned_seen;

static int on_owned(const sbx_owned_sandbox *s, void *ud)
{
    owned_seen *w = ud;
    w->n++;
    snprintf(w->id, sizeof w->id, "%s", s->id);
    snprintf(w->token, sizeof w->token, "%s", s->create_token);
    w->created_at = s->created_at;
    w->expires_at = s->expires_at;
    return 0;
}

/* A sandbox another client made at the fake: its id (free()). */
static char *foreign_sandbox(const char *tags_json)
{
    char *body = tu_strdup_printf("{\"tags\":%s}", tags_json);
    char *out = NULL;
    cr_assert_eq(tu_fake_http("POST", "/_fake/sandboxes", NULL, body, &out), 200);
    json_object *j = json_tokener_parse(out);
    char *id = strdup(tu_json_str(j, "sandbox_id"));
    json_object_put(j);
    free(out);
    free(body);
    return id;
}

static const char *fake_state(const char *id, json_object **keep)
{
    *keep = fake_sandbox(id);
    return tu_json_str(*keep, "state");
}

/* list_owned reports exactly the sandboxes this library made (its tags:
 * sbx_backend=modal and a create token), with the token, created_at and
 * the expiry it recorded; a sandbox of another client, tagged or not, is
 * neither listed nor destroyed by id (invalid_argument naming it). */
Test(modal, list_owned_and_destroy_by_id_take_only_what_this_library_made)
{
    size_t n0 = fake_live();
    char *other = foreign_sandbox("{}");
    char *lookalike = foreign_sandbox("{\"sbx_backend\":\"modal\"}");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 600, NULL), 0);
    double t0 = (double)time(NULL);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    const char *id = sbx_sandbox_get0_id(g_sb);
    owned_seen w = { 0 };
    sbx_error *err = NULL;
    cr_assert_eq(sbx_client_list_owned(g_client, on_owned, &w, &err), 1, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(w.n, 1);
    cr_assert_str_eq(w.id, id);
    cr_assert_eq(strlen(w.token), 36, "token %s", w.token);
    cr_assert_eq(strncmp(w.token, "sbx-", 4), 0, "token %s", w.token);
    json_object *sb = fake_sandbox(id), *tags = NULL;
    cr_assert(json_object_object_get_ex(sb, "tags", &tags));
    cr_assert_str_eq(tu_json_str(tags, "sbx_create_token"), w.token);
    cr_assert_str_eq(tu_json_str(tags, "sbx_backend"), "modal");
    cr_assert_float_eq(w.expires_at, strtod(tu_json_str(tags, "sbx_expires_at"), NULL), 1e-6);
    cr_assert(w.expires_at >= t0 + 600 && w.expires_at <= t0 + 602, "expires_at %.0f",
              w.expires_at);
    cr_assert(w.created_at >= t0 - 1 && w.created_at <= t0 + 30, "created_at %.3f",
              w.created_at);
    json_object_put(sb);

    cr_assert_eq(sbx_client_destroy_by_id(g_client, lookalike, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    char *msg = tu_strdup_printf("modal sandbox %s was not made by this library (no "
                                 "sbx_create_token tag): not terminated", lookalike);
    cr_assert_str_eq(sbx_error_get0_message(err), msg);
    free(msg);
    sbx_error_free(err);
    err = NULL;
    json_object *keep = NULL;
    cr_assert_str_eq(fake_state(lookalike, &keep), "running");
    json_object_put(keep);
    cr_assert_eq(sbx_client_destroy_by_id(g_client, other, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_free(err);
    err = NULL;
    cr_assert_str_eq(fake_state(other, &keep), "running");
    json_object_put(keep);

    cr_assert_eq(sbx_client_destroy_by_id(g_client, id, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_str_eq(fake_state(id, &keep), "terminated");
    json_object_put(keep);
    cr_assert_eq(sbx_client_list_owned(g_client, NULL, NULL, &err), 0);
    /* Again: gone already is done. */
    cr_assert_eq(sbx_client_destroy_by_id(g_client, id, &err), 0);
    cr_assert_eq(fake_live(), n0 + 2);
    const char *foreign[] = { other, lookalike };
    for (int i = 0; i < 2; i++) {
        char *path = tu_strdup_printf("/_fake/sandbox/%s/vanish", foreign[i]);
        cr_assert_eq(tu_fake_http("POST", path, NULL, NULL, NULL), 204);
        free(path);
    }
    free(other);
    free(lookalike);
}

typedef struct gc_seen {
    char id[128];
    int found, reaped;
    sbx_gc_reason reason;
} gc_seen;

static int on_gc(const sbx_gc_item *it, void *ud)
{
    gc_seen *g = ud;
    if (strcmp(it->backend, "modal") == 0) {
        g->found++;
        snprintf(g->id, sizeof g->id, "%s", it->id);
        g->reaped = it->reaped;
        g->reason = it->reason;
    }
    return 0;
}

/* A create whose answer was lost (the fake makes the sandbox 3 s after the
 * client gave up at 1 s, after the client is gone): `sbx gc` finds it
 * through list_owned by the create token its row recorded once the
 * lifetime has passed, and terminates it. */
Test(modal, gc_reaps_a_create_whose_answer_was_lost, .timeout = 60)
{
    char *state = tu_mkdtemp("sbx-modal-state");
    cr_assert_eq(setenv("SBX_STATE_DIR", state, 1), 0);
    size_t n0 = fake_live();
    tu_fake_post("/_fake/faults", "{\"path\":\"SandboxCreate$\",\"action\":\"pass\","
                                  "\"delay\":3}");
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 1.0, NULL), 0);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 4, NULL), 0);
    double t0 = tu_now();
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_TIMEOUT, "%s", sbx_error_get0_message(err));
    sbx_error_free(err);
    err = NULL;
    /* The client (and its own reaper) ends before the late sandbox is made. */
    sbx_client_free(g_client);
    g_client = NULL;
    while (fake_live() == n0 && tu_now() - t0 < 15)
        usleep(100000);
    cr_assert_eq(fake_live(), n0 + 1, "the late sandbox was not made");
    while (tu_now() - t0 < 5.5)
        usleep(100000);
    gc_seen g = { "", 0, 0, 0 };
    cr_assert(sbx_gc(0, on_gc, &g, &err) >= 1, "gc: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(g.found, 1);
    cr_assert_eq(g.reason, SBX_GC_EXPIRED);
    cr_assert_eq(g.reaped, 1);
    cr_assert_eq(fake_live(), n0, "gc left the late sandbox");
    json_object *keep = NULL;
    cr_assert_str_eq(fake_state(g.id, &keep), "terminated");
    json_object_put(keep);
    unsetenv("SBX_STATE_DIR");
    tu_rmtree(state);
    free(state);
}

/* ------------------------------------------------------------ tunnels */

/* The fake's tunnel certificate in a file (free() the path, unlink it). */
static char *fake_ca_file(void)
{
    char *pem = NULL;
    cr_assert_eq(tu_fake_http("GET", "/_fake/tls_ca", NULL, NULL, &pem), 200);
    char *path = strdup("/tmp/sbx-modal-ca-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, pem, strlen(pem)), (ssize_t)strlen(pem));
    close(fd);
    free(pem);
    return path;
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    cr_assert_lt(strlen(ud) + sz * n, 256);
    strncat(ud, p, sz * n);
    return sz * n;
}

/* A port given at create is opened as a TLS tunnel (open_ports); the
 * sandbox's server answers through the URL resolve_port gives, verified
 * against the tunnel's certificate. A port not opened is not_found, and
 * Modal opens ports only at create. */
Test(modal, a_port_given_at_create_is_reached_through_its_tunnel, .timeout = 60)
{
    int port = (int)tu_free_port();
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_add_port(o, (unsigned)port, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    char *script = tu_strdup_printf("mkdir -p /tmp/www && printf 'through the tunnel' "
                                    ">/tmp/www/index.html && (python3 -m http.server %d "
                                    "--bind 127.0.0.1 --directory /tmp/www >/dev/null 2>&1 &) "
                                    "&& for i in $(seq 100); do python3 -c 'import socket;"
                                    "socket.create_connection((\"127.0.0.1\",%d))' "
                                    "2>/dev/null && exit 0; sleep 0.1; done; exit 1",
                                    port, port);
    sbx_result *r = tu_sh(g_sb, script, 30);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    free(script);
    sbx_error *err = NULL;
    char *url = sbx_sandbox_resolve_port(g_sb, (unsigned)port, &err);
    cr_assert_not_null(url, "%s", err ? sbx_error_get0_message(err) : "");
    json_object *sb = fake_sandbox(sbx_sandbox_get0_id(g_sb)), *tun = NULL, *tp = NULL;
    cr_assert(json_object_object_get_ex(sb, "tunnels", &tun));
    char key[16];
    snprintf(key, sizeof key, "%d", port);
    cr_assert(json_object_object_get_ex(tun, key, &tp), "no tunnel for %s", key);
    char *want = tu_strdup_printf("https://127.0.0.1:%d", json_object_get_int(tp));
    cr_assert_str_eq(url, want);
    json_object_put(sb);
    free(want);

    char *ca = fake_ca_file();
    char body[256] = "";
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, ca);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
    CURLcode cc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    cr_assert_eq(cc, CURLE_OK, "%s: %s", url, curl_easy_strerror(cc));
    cr_assert_eq(status, 200);
    cr_assert_str_eq(body, "through the tunnel");
    unlink(ca);
    free(ca);
    free(url);

    uint16_t *ports = NULL;
    size_t n = 0;
    cr_assert_eq(sbx_sandbox_list_ports(g_sb, &ports, &n, &err), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(ports[0], port);
    free(ports);
    unsigned other = port == 65535 ? 65534u : (unsigned)port + 1;
    cr_assert_null(sbx_sandbox_resolve_port(g_sb, other, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND);
    char *msg = tu_strdup_printf("modal sandbox %s: port %u is not exposed",
                                 sbx_sandbox_get0_id(g_sb), other);
    cr_assert_str_eq(sbx_error_get0_message(err), msg);
    free(msg);
    snprintf(key, sizeof key, "%u", other);
    cr_assert_str_eq(sbx_error_get0_context(err, "port"), key);
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(sbx_sandbox_expose_port(g_sb, other, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_FEATURE_NOT_SUPPORTED);
    sbx_error_free(err);
    r = tu_sh(g_sb, "pkill -f 'http.server' ; true", 10);
    sbx_result_free(r);
}

/* ------------------------------------------------------------ connections */

/* Over TLS (as Modal is reached) the channels re-use their connections:
 * five commands one after another, each some five router calls (two of
 * them at once: its stdout and stderr), go over at most two router
 * connections and two control connections. */
Test(modal, sequential_calls_reuse_connections_over_tls, .timeout = 60)
{
    const char *cp = getenv("SBX_MODAL_GRPCS_PORT"), *rp = getenv("SBX_MODAL_ROUTERS_PORT");
    cr_assert(cp && *cp && rp && *rp, "run through tests/hosted.sh");
    char *ca = fake_ca_file();
    char *cfg = tu_strdup_printf("{\"server_url\":\"https://127.0.0.1:%s\",\"ca_file\":\"%s\"}",
                                 cp, ca);
    char *rurl = tu_strdup_printf("{\"url\":\"https://127.0.0.1:%s\"}", rp);
    tu_fake_post("/_fake/router_url", rurl);
    sbx_client_free(g_client);
    sbx_error *err = NULL;
    g_client = sbx_client_new_with_config("modal", SBX_PLUGIN_MODE_DEFAULT, cfg, &err);
    cr_assert_not_null(g_client, "%s", err ? sbx_error_get0_message(err) : "");
    g_sb = tu_create(g_client, NULL);
    for (int i = 0; i < 5; i++) {
        sbx_result *r = tu_sh(g_sb, "echo $((6 * 7))", 20);
        tu_assert_stdout(r, "42\n");
        sbx_result_free(r);
    }
    json_object *log = tu_fake_log();
    char peers[2][64][64];
    int np[2] = { 0, 0 }, ncalls[2] = { 0, 0 };
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i);
        const char *path = tu_json_str(e, "path"), *peer = tu_json_str(e, "peer");
        if (!path || !peer)
            continue;
        int k = strncmp(path, ROUTER, strlen(ROUTER)) == 0 ? 1 : 0;
        ncalls[k]++;
        int seen = 0;
        for (int j = 0; j < np[k]; j++)
            seen |= strcmp(peers[k][j], peer) == 0;
        if (!seen && np[k] < 64)
            snprintf(peers[k][np[k]++], sizeof peers[k][0], "%s", peer);
    }
    json_object_put(log);
    cr_assert_geq(ncalls[1], 20, "%d router calls", ncalls[1]);
    cr_assert_geq(ncalls[0], 5, "%d control calls", ncalls[0]);
    cr_assert(np[1] >= 1 && np[1] <= 2, "%d router calls over %d connections", ncalls[1], np[1]);
    cr_assert(np[0] >= 1 && np[0] <= 2, "%d control calls over %d connections", ncalls[0],
              np[0]);
    unlink(ca);
    free(ca);
    free(cfg);
    free(rurl);
}
