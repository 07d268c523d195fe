/*
 * test_kubernetes.c — what only the kubernetes backend does, through its
 * contract fake of the API server (tests/kubernetes.sh starts it with TLS,
 * a generated CA and client certificate, and runs this program with
 * SBX_TEST_BACKEND=kubernetes and a KUBECONFIG that reaches it):
 *  - CASE-43: stdin EOF over v5 (the [255, 0] close), 1 MiB of stdin, no
 *    stdin, and a server that speaks only v4 (stdin streamed as
 *    length-prefixed chunks ended by the chunk "0\n": read by the command
 *    as it comes, all 256 byte values exact, EOF at its end); a stream that
 *    closes without a Status, or is cut, is an error, never exit 0;
 *  - CASE-54: create returns only once the container runs and takes an
 *    exec; ImagePullBackOff and CrashLoopBackOff fail create with the
 *    reason, and the pod is deleted;
 *  - the pod's body: restricted Pod Security fields, resources, lifetime,
 *    ownership labels; the lifetime counted from readiness (the deadline
 *    lowered by a PATCH once the pod is ready); the deny-egress NetworkPolicy made and deleted;
 *    delete with the grace period;
 *  - a terminal with resize on channel 4;
 *  - credentials: a bearer token with the cluster's CA; kubeconfig errors
 *    naming the bad value (context, exec plugin, base64); the files of
 *    KUBECONFIG merged as kubectl merges them.
 * The fake's control routes are reached without TLS
 * (SBX_K8S_FAKE_CONTROL_URL).
 */
#include "testutil.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <sbx/sbx.h>

static sbx_client *g_client;
static sbx_sandbox *g_sb;
static char *g_tmp;

static void setup(void)
{
    sbx_error *err = NULL;
    cr_assert_str_eq(tu_backend(), "kubernetes", "run by tests/kubernetes.sh");
    tu_fake_use("SBX_K8S_FAKE_CONTROL_URL");
    tu_fake_reset();
    tu_fake_post("/_fake/config", "{\"pending_s\":0.05,\"creating_s\":0.05,\"protocols\":"
                                  "[\"v5.channel.k8s.io\",\"v4.channel.k8s.io\"],"
                                  "\"exec_fault\":null}");
    g_tmp = tu_fresh_tmpdir();
    g_client = sbx_client_new("kubernetes", &err);
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
    g_client = NULL;
    tu_fake_post("/_fake/config", "{\"pending_s\":0.05,\"creating_s\":0.05,\"protocols\":"
                                  "[\"v5.channel.k8s.io\",\"v4.channel.k8s.io\"],"
                                  "\"exec_fault\":null}");
    tu_fake_reset();
    tu_rmtree(g_tmp);
    free(g_tmp);
}

TestSuite(kubernetes, .init = setup, .fini = teardown, .timeout = 90);

/* GET a control route: parsed JSON (json_object_put() it). */
static json_object *control_get(const char *path)
{
    char *out = NULL;
    int st = tu_fake_http("GET", path, NULL, NULL, &out);
    cr_assert_eq(st, 200, "GET %s: %d %s", path, st, out ? out : "");
    json_object *j = json_tokener_parse(out);
    cr_assert_not_null(j, "GET %s: not JSON: %s", path, out);
    free(out);
    return j;
}

/* The last exec record of the fake whose command's script holds @needle. */
static json_object *last_exec(json_object *execs, const char *needle)
{
    json_object *found = NULL;
    for (size_t i = 0; i < json_object_array_length(execs); i++) {
        json_object *e = json_object_array_get_idx(execs, i), *cmd = NULL;
        json_object_object_get_ex(e, "command", &cmd);
        const char *script = json_object_get_string(json_object_array_get_idx(cmd, 2));
        if (script && strstr(script, needle))
            found = e;
    }
    cr_assert_not_null(found, "no exec ran a script holding %s", needle);
    return found;
}

/* The fake's record of pod @name (from /_fake/pods). */
static json_object *pod_record(json_object *pods, const char *name)
{
    for (size_t i = 0; i < json_object_array_length(pods); i++) {
        json_object *p = json_object_array_get_idx(pods, i);
        if (strcmp(tu_json_str(p, "name"), name) == 0)
            return p;
    }
    cr_assert_fail("the fake has no pod %s", name);
    return NULL;
}

/* Makes a sandbox on @cl, runs `echo WORD` in it (exit 0, "WORD\n"), checks
 * that the fake made its pod in namespace @ns, and destroys it. */
static void assert_runs_in_namespace(sbx_client *cl, const char *word, const char *ns)
{
    sbx_error *err = NULL;
    sbx_options *o = sbx_options_new();
    sbx_sandbox *sb = sbx_sandbox_create(cl, o, &err);
    sbx_options_free(o);
    cr_assert_not_null(sb, "%s", err ? sbx_error_get0_message(err) : "");
    char *cmd = tu_strdup_printf("echo %s", word);
    char *want = tu_strdup_printf("%s\n", word);
    sbx_result *r = tu_sh(sb, cmd, 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, want);
    sbx_result_free(r);
    free(cmd);
    free(want);
    json_object *pods = control_get("/_fake/pods");
    json_object *rec = pod_record(pods, sbx_sandbox_get0_id(sb));
    cr_assert_str_eq(tu_json_str(rec, "ns"), ns);
    json_object_put(pods);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
}

static sbx_sandbox *create_plain(void)
{
    sbx_options *o = sbx_options_new();
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    return sb;
}

static sbx_result *run_stdin(sbx_sandbox *sb, const char *script, const void *in, size_t n,
                             double timeout)
{
    sbx_exec_request rq = { .struct_size = sizeof rq, .shell = script, .stdin_data = in,
                            .stdin_len = n, .timeout_secs = timeout };
    return tu_exec(sb, &rq);
}

static int json_int(json_object *o, const char *key)
{
    json_object *v = NULL;
    cr_assert(json_object_object_get_ex(o, key, &v), "no %s", key);
    return json_object_get_int(v);
}

static int jbool(json_object *o, const char *key)
{
    json_object *v = NULL;
    cr_assert(json_object_object_get_ex(o, key, &v), "no %s", key);
    return json_object_get_boolean(v);
}

/* ------------------------------------------------------------------ CASE-43 */

Test(kubernetes, case43_v5_stdin_eof_reaches_the_command)
{
    g_sb = create_plain();
    double t0 = tu_now();
    sbx_result *r = run_stdin(g_sb, "cat; sleep 1; echo done", "hello\n", 6, 20);
    double took = tu_now() - t0;
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "hello\ndone\n");
    tu_assert_stderr(r, "");
    sbx_result_free(r);
    cr_assert_lt(took, 5.0, "took %.2f s", took);
    json_object *execs = control_get("/_fake/execs");
    json_object *e = last_exec(execs, "cat; sleep 1; echo done");
    json_object *offered = NULL, *frames = NULL;
    json_object_object_get_ex(e, "offered", &offered);
    cr_assert_str_eq(json_object_get_string(json_object_array_get_idx(offered, 0)),
                     "v5.channel.k8s.io");
    cr_assert_str_eq(tu_json_str(e, "protocol"), "v5.channel.k8s.io");
    cr_assert_eq(json_int(e, "stdin_bytes"), 6);
    cr_assert_eq(jbool(e, "stdin_closed"), 1);
    /* The client's frames: stdin (channel 0), then the close (255). */
    json_object_object_get_ex(e, "client_frames", &frames);
    size_t nf = json_object_array_length(frames);
    cr_assert_geq(nf, 2);
    cr_assert_eq(json_object_get_int(json_object_array_get_idx(frames, nf - 2)), 0);
    cr_assert_eq(json_object_get_int(json_object_array_get_idx(frames, nf - 1)), 255);
    json_object_put(execs);
}

Test(kubernetes, case43_one_mib_of_stdin)
{
    g_sb = create_plain();
    size_t n = 1048576;
    char *z = malloc(n);
    cr_assert_not_null(z);
    memset(z, 'z', n);
    sbx_result *r = run_stdin(g_sb, "wc -c | tr -d ' '", z, n, 20);
    free(z);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "1048576\n");
    sbx_result_free(r);
}

Test(kubernetes, case43_no_stdin_is_eof_at_once)
{
    g_sb = create_plain();
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "cat; echo eof", 20);
    double took = tu_now() - t0;
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "eof\n");
    sbx_result_free(r);
    cr_assert_lt(took, 2.0, "took %.2f s", took);
    json_object *execs = control_get("/_fake/execs");
    json_object *e = last_exec(execs, "cat; echo eof");
    cr_assert_eq(jbool(e, "stdin"), 0, "stdin was requested");
    json_object_put(execs);
}

Test(kubernetes, case43_v4_only_server_gets_stdin_in_chunks_ended_in_band)
{
    tu_fake_post("/_fake/config", "{\"protocols\":[\"v4.channel.k8s.io\"]}");
    g_sb = create_plain();
    double t0 = tu_now();
    sbx_result *r = run_stdin(g_sb, "cat; sleep 1; echo done", "hello\n", 6, 20);
    double took = tu_now() - t0;
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "hello\ndone\n");
    sbx_result_free(r);
    cr_assert_lt(took, 5.0, "took %.2f s (a v4 stream must not wait for the timeout)", took);
    json_object *execs = control_get("/_fake/execs");
    json_object *e = last_exec(execs, "cat; sleep 1; echo done");
    cr_assert_str_eq(tu_json_str(e, "protocol"), "v4.channel.k8s.io");
    json_object *cmd = NULL;
    json_object_object_get_ex(e, "command", &cmd);
    const char *script = json_object_get_string(json_object_array_get_idx(cmd, 2));
    cr_assert(strncmp(script, "__sbx_f=/tmp/.sbx-stdin-", 24) == 0, "script: %s", script);
    cr_assert(strstr(script, "mkfifo -m 600 \"$__sbx_f\""), "script: %s", script);
    /* v4 has no close message: "6\nhello\n" then "0\n", both on channel 0. */
    cr_assert_eq(jbool(e, "stdin_closed"), 0);
    cr_assert_eq(json_int(e, "stdin_bytes"), 2 + 6 + 2);
    json_object *frames = NULL;
    json_object_object_get_ex(e, "client_frames", &frames);
    size_t nf = json_object_array_length(frames);
    cr_assert_geq(nf, 2);
    cr_assert_eq(json_object_get_int(json_object_array_get_idx(frames, nf - 2)), 0);
    cr_assert_eq(json_object_get_int(json_object_array_get_idx(frames, nf - 1)), 0);
    json_object_put(execs);
    /* No FIFO is left in the pod. */
    r = tu_sh(g_sb, "ls -a /tmp | grep -c sbx-stdin", 20);
    tu_assert_exit(r, 1);
    tu_assert_stdout(r, "0\n");
    sbx_result_free(r);
    /* And the exit code still comes from the v4 Status. */
    r = tu_sh(g_sb, "exit 5", 20);
    tu_assert_exit(r, 5);
    sbx_result_free(r);
}

Test(kubernetes, case43_v4_one_mib_of_all_byte_values_is_exact)
{
    tu_fake_post("/_fake/config", "{\"protocols\":[\"v4.channel.k8s.io\"]}");
    g_sb = create_plain();
    size_t n = 1048576;
    unsigned char *b = malloc(n);
    cr_assert_not_null(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)((i * 7 + i / 256) & 0xff);
    /* The bytes come back unchanged, and the command saw exactly n of them. */
    sbx_result *r = run_stdin(g_sb, "cat", b, n, 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout_bytes(r, b, n);
    sbx_result_free(r);
    r = run_stdin(g_sb, "wc -c | tr -d ' '", b, n, 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "1048576\n");
    sbx_result_free(r);
    /* A file written over v4 (cat over exec, its stdin in chunks) reads
     * back the same. */
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/work/v4.bin", b, n, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    char *back = NULL;
    size_t blen = 0;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, "/work/v4.bin", &back, &blen, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(blen, n);
    cr_assert_eq(memcmp(back, b, n), 0);
    free(back);
    json_object *execs = control_get("/_fake/execs");
    cr_assert_str_eq(tu_json_str(json_object_array_get_idx(execs,
                                                           json_object_array_length(execs) - 1),
                                 "protocol"), "v4.channel.k8s.io");
    json_object_put(execs);
    free(b);
}

typedef struct out_sink {
    char out[4096];
    size_t len;
} out_sink;

static void sink_out(sbx_stream stream, const void *data, size_t len, void *ud)
{
    out_sink *k = ud;
    if (stream != SBX_STREAM_STDOUT)
        return;
    if (k->len + len >= sizeof k->out)
        len = sizeof k->out - 1 - k->len;
    memcpy(k->out + k->len, data, len);
    k->len += len;
    k->out[k->len] = '\0';
}

/* A process whose stdin stays open: on @proto, a line written comes back
 * before stdin is closed; the close ends cat; the exit code is the
 * command's. */
static void stdin_streams_while_it_runs(const char *proto)
{
    char *cfg = tu_strdup_printf("{\"protocols\":[\"%s\"]}", proto);
    tu_fake_post("/_fake/config", cfg);
    free(cfg);
    g_sb = create_plain();
    out_sink k = { .len = 0 };
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    sbx_error *err = NULL;
    rq.shell = "cat; echo end; exit 3";
    rq.on_output = sink_out;
    rq.user_data = &k;
    rq.flags = SBX_EXEC_STDIN_OPEN;
    rq.timeout_secs = 30;
    sbx_process *p = sbx_sandbox_start_process(g_sb, &rq, &err);
    cr_assert_not_null(p, "start_process: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_process_write_stdin(p, "first\n", 6, &err), 0);
    double end = tu_now() + 15;
    while (!strstr(k.out, "first\n")) {
        cr_assert_eq(sbx_process_wait(p, 0.05, NULL, NULL, &err), 0,
                     "ended before its stdin was closed; stdout: \"%s\"", k.out);
        cr_assert(tu_now() < end, "\"first\" did not come back within 15 s");
    }
    cr_assert_str_eq(k.out, "first\n");
    cr_assert_eq(sbx_process_write_stdin(p, "second\n", 7, &err), 0);
    cr_assert_eq(sbx_process_close_stdin(p, &err), 0);
    int code = -1;
    cr_assert_eq(sbx_process_wait(p, 20, &code, NULL, &err), 1);
    cr_assert_eq(code, 3);
    cr_assert_str_eq(k.out, "first\nsecond\nend\n");
    sbx_process_free(p);
    json_object *execs = control_get("/_fake/execs");
    json_object *e = last_exec(execs, "echo end; exit 3");
    cr_assert_str_eq(tu_json_str(e, "protocol"), proto);
    json_object_put(execs);
}

Test(kubernetes, v4_stdin_streams_while_the_command_runs)
{
    stdin_streams_while_it_runs("v4.channel.k8s.io");
}

Test(kubernetes, v5_stdin_streams_while_the_command_runs)
{
    stdin_streams_while_it_runs("v5.channel.k8s.io");
}

/* On v4, a command that ends without reading its stdin ends the exec
 * while the caller's stdin is still open (the decoder is killed). */
Test(kubernetes, v4_command_that_ignores_open_stdin_ends)
{
    tu_fake_post("/_fake/config", "{\"protocols\":[\"v4.channel.k8s.io\"]}");
    g_sb = create_plain();
    out_sink k = { .len = 0 };
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    sbx_error *err = NULL;
    rq.shell = "echo quick";
    rq.on_output = sink_out;
    rq.user_data = &k;
    rq.flags = SBX_EXEC_STDIN_OPEN;
    rq.timeout_secs = 30;
    sbx_process *p = sbx_sandbox_start_process(g_sb, &rq, &err);
    cr_assert_not_null(p, "start_process: %s", err ? sbx_error_get0_message(err) : "");
    int code = -1;
    cr_assert_eq(sbx_process_wait(p, 10, &code, NULL, &err), 1, "still running");
    cr_assert_eq(code, 0);
    cr_assert_str_eq(k.out, "quick\n");
    sbx_process_free(p);
}

static void no_status_fault(const char *fault)
{
    g_sb = create_plain();
    char *cfg = tu_strdup_printf("{\"exec_fault\":\"%s\"}", fault);
    tu_fake_post("/_fake/config", cfg);
    free(cfg);
    sbx_exec_request rq = { .struct_size = sizeof rq, .shell = "echo out; exit 0",
                            .timeout_secs = 20 };
    sbx_error *err = tu_exec_fail(g_sb, &rq, SBX_ERROR_CONNECTION);
    const char *msg = sbx_error_get0_message(err);
    if (strcmp(fault, "no_status") == 0) {
        char *want = tu_strdup_printf("the exec stream of pod %s closed without a status: the "
                                      "command's exit code is unknown",
                                      sbx_sandbox_get0_id(g_sb));
        cr_assert_str_eq(msg, want);
        free(want);
    } else {
        cr_assert(strstr(msg, "open the exec stream: the connection ended without a close "
                              "frame"), "message: %s", msg);
    }
    sbx_error_free(err);
    /* The sandbox is fine afterwards. */
    sbx_result *r = tu_sh(g_sb, "echo ok", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "ok\n");
    sbx_result_free(r);
}

Test(kubernetes, case43_stream_closed_without_status_is_an_error)
{
    no_status_fault("no_status");
}

Test(kubernetes, case43_stream_cut_without_close_frame_is_an_error)
{
    no_status_fault("drop");
}

/* ------------------------------------------------------------------ CASE-54 */

Test(kubernetes, case54_a_create_returns_when_the_container_takes_an_exec)
{
    tu_fake_post("/_fake/config", "{\"pending_s\":2,\"creating_s\":2}");
    double t0 = tu_now();
    g_sb = create_plain();
    double took = tu_now() - t0;
    cr_assert_geq(took, 4.0, "create returned after %.2f s, before the container ran", took);
    sbx_result *r = tu_sh(g_sb, "echo ready", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "ready\n");
    sbx_result_free(r);
    /* No exec upgrade was refused: the first one came once the container ran. */
    json_object *log = tu_fake_log();
    int refused = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *st = NULL;
        json_object_object_get_ex(e, "status", &st);
        if (strstr(tu_json_str(e, "path"), "/exec") && json_object_get_int(st) == 400)
            refused++;
    }
    cr_assert_eq(refused, 0);
    json_object_put(log);
}

/* Refusals before the 101 are retried with backoff; a stream that was
 * upgraded is never sent again. */
Test(kubernetes, case54_refused_upgrades_are_retried_upgraded_streams_are_not)
{
    g_sb = create_plain();
    tu_fake_reset();
    tu_fake_post("/_fake/config", "{\"refuse_execs\":3}");
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "echo after-refusals", 20);
    double took = tu_now() - t0;
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "after-refusals\n");
    sbx_result_free(r);
    cr_assert_lt(took, 10.0, "took %.2f s", took);
    json_object *log = tu_fake_log();
    char seq[64] = "";
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *st = NULL;
        json_object_object_get_ex(e, "status", &st);
        if (strstr(tu_json_str(e, "path"), "/exec"))
            snprintf(seq + strlen(seq), sizeof seq - strlen(seq), "%d ", json_object_get_int(st));
    }
    json_object_put(log);
    cr_assert_str_eq(seq, "400 400 400 101 ");
    /* Cut after the upgrade: an error, and the command was not sent again. */
    tu_fake_reset();
    tu_fake_post("/_fake/config", "{\"exec_fault\":\"drop\"}");
    sbx_exec_request rq = { .struct_size = sizeof rq, .shell = "echo once >> /work/count",
                            .timeout_secs = 20 };
    sbx_error *err = tu_exec_fail(g_sb, &rq, SBX_ERROR_CONNECTION);
    sbx_error_free(err);
    r = tu_sh(g_sb, "cat /work/count", 20);
    tu_assert_stdout(r, "once\n");
    sbx_result_free(r);
}

Test(kubernetes, a_pod_deleted_elsewhere_is_gone)
{
    g_sb = create_plain();
    char *path = tu_strdup_printf("/api/v1/namespaces/sbx-test/pods/%s?gracePeriodSeconds=0",
                                  sbx_sandbox_get0_id(g_sb));
    int st = tu_fake_http("DELETE", path, "Authorization: Bearer sbx-test-dummy-key", NULL,
                          NULL);
    cr_assert_eq(st, 200);
    free(path);
    sbx_exec_request rq = { .struct_size = sizeof rq, .shell = "echo never", .timeout_secs = 20 };
    sbx_error *err = tu_exec_fail(g_sb, &rq, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    sbx_error_free(err);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 0);
}

static void backoff_case(const char *image, const char *reason, const char *more)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_image(o, image, NULL), 0);
    cr_assert_eq(sbx_options_set_timeout_secs(o, 20, NULL), 0);
    sbx_error *err = NULL;
    double t0 = tu_now();
    sbx_sandbox *sb = sbx_sandbox_create(g_client, o, &err);
    double took = tu_now() - t0;
    sbx_options_free(o);
    cr_assert_null(sb);
    cr_assert_lt(took, 22.0);
    tu_assert_error(err, SBX_ERROR_CREATION_FAILED, reason, NULL);
    const char *msg = sbx_error_get0_message(err);
    cr_assert(strstr(msg, more), "message: %s", msg);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), reason);
    const char *id = sbx_error_get0_context(err, "sandbox_id");
    cr_assert_not_null(id);
    json_object *pods = control_get("/_fake/pods");
    json_object *p = pod_record(pods, id), *del = NULL;
    json_object_object_get_ex(p, "deleted", &del);
    cr_assert(json_object_is_type(del, json_type_double), "pod %s was not deleted", id);
    json_object_put(pods);
    sbx_error_free(err);
}

Test(kubernetes, case54_b_image_pull_backoff_fails_create_and_deletes_the_pod)
{
    backoff_case("nosuch:tag", "ImagePullBackOff", "Back-off pulling image \"nosuch:tag\"");
}

Test(kubernetes, case54_c_crash_loop_backoff_fails_create_and_deletes_the_pod)
{
    backoff_case("crashloop:1", "CrashLoopBackOff", "(last exit code 1)");
}

/* ------------------------------------------------------------------ the pod */

/* o.a.b... (NULL-terminated keys; an integer key "#N" indexes an array). */
static json_object *jpath(json_object *o, ...)
{
    va_list ap;
    va_start(ap, o);
    for (const char *k; o && (k = va_arg(ap, const char *));) {
        json_object *next = NULL;
        if (k[0] == '#')
            next = json_object_array_get_idx(o, (size_t)atoi(k + 1));
        else
            json_object_object_get_ex(o, k, &next);
        o = next;
    }
    va_end(ap);
    return o;
}

static const char *jstr(json_object *o)
{
    cr_assert_not_null(o);
    return json_object_get_string(o);
}

Test(kubernetes, pod_is_restricted_with_resources_lifetime_and_labels)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 0.5, NULL), 0);
    cr_assert_eq(sbx_options_set_memory_mb(o, 256, NULL), 0);
    cr_assert_eq(sbx_options_set_timeout_secs(o, 600, NULL), 0);
    cr_assert_eq(sbx_options_set_gpu(o, "nvidia.com/gpu:2", NULL), 0);
    double t0 = (double)time(NULL);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    json_object *pods = control_get("/_fake/pods");
    json_object *p = pod_record(pods, sbx_sandbox_get0_id(g_sb));
    json_object *spec = jpath(p, "spec", NULL), *c = jpath(spec, "containers", "#0", NULL);
    /* Restricted Pod Security Standard. */
    cr_assert_eq(json_object_get_boolean(jpath(spec, "securityContext", "runAsNonRoot", NULL)), 1);
    cr_assert_eq(json_object_get_int(jpath(spec, "securityContext", "runAsUser", NULL)), 1000);
    cr_assert_str_eq(jstr(jpath(spec, "securityContext", "seccompProfile", "type", NULL)),
                     "RuntimeDefault");
    cr_assert_eq(json_object_get_boolean(jpath(c, "securityContext", "allowPrivilegeEscalation",
                                               NULL)), 0);
    cr_assert_not_null(jpath(c, "securityContext", "allowPrivilegeEscalation", NULL));
    cr_assert_str_eq(jstr(jpath(c, "securityContext", "capabilities", "drop", "#0", NULL)), "ALL");
    cr_assert_eq(json_object_get_boolean(jpath(spec, "automountServiceAccountToken", NULL)), 0);
    cr_assert_not_null(jpath(spec, "automountServiceAccountToken", NULL));
    /* Resources: requests = limits. */
    cr_assert_str_eq(jstr(jpath(c, "resources", "limits", "cpu", NULL)), "500m");
    cr_assert_str_eq(jstr(jpath(c, "resources", "limits", "memory", NULL)), "256Mi");
    cr_assert_eq(json_object_get_int(jpath(c, "resources", "limits", "nvidia.com/gpu", NULL)), 2);
    cr_assert_str_eq(jstr(jpath(c, "resources", "requests", "memory", NULL)), "256Mi");
    /* The lifetime, with the start margin. */
    /* Made with the lifetime plus the bound on a start (360 s), then
     * lowered once ready to the seconds since status.startTime (rounded
     * up) plus the lifetime: one PATCH. */
    cr_assert_eq(json_object_get_int(jpath(spec, "activeDeadlineSeconds", NULL)), 960);
    json_object *patches = jpath(p, "patches", NULL);
    cr_assert_eq(json_object_array_length(patches), 1);
    int patched = json_object_get_int(jpath(patches, "#0", "spec", "activeDeadlineSeconds",
                                            NULL));
    struct tm stm = { 0 };
    cr_assert_not_null(strptime(jstr(jpath(p, "start_time", NULL)), "%Y-%m-%dT%H:%M:%SZ", &stm));
    double since = json_object_get_double(jpath(patches, "#0", "at", NULL)) - (double)timegm(&stm);
    cr_assert(patched >= 600 + 1 && patched <= 600 + (int)ceil(since),
              "activeDeadlineSeconds %d, %.3f s after startTime", patched, since);
    cr_assert_str_eq(jstr(jpath(spec, "restartPolicy", NULL)), "Never");
    /* Ownership labels. */
    json_object *labels = jpath(p, "labels", NULL);
    cr_assert_str_eq(jstr(jpath(labels, "sbx_backend", NULL)), "kubernetes");
    cr_assert_str_eq(jstr(jpath(labels, "sandbox", NULL)), sbx_sandbox_get0_id(g_sb));
    const char *tok = jstr(jpath(labels, "sbx_create_token", NULL));
    cr_assert_eq(strlen(tok), 36, "token %s", tok);
    cr_assert(strncmp(tok, "sbx-", 4) == 0 && strspn(tok + 4, "0123456789abcdef") == 32,
              "token %s", tok);
    double exp = strtod(jstr(jpath(labels, "sbx_expires_at", NULL)), NULL);
    cr_assert(exp >= t0 + 599 && exp <= t0 + 660, "expires_at %.0f, created at %.0f", exp, t0);
    json_object_put(pods);
    /* The commands run as the pod's non-root user, with HOME writable. */
    sbx_result *r = tu_sh(g_sb, "id -u; echo x > \"$HOME/f\" && cat \"$HOME/f\"", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "1000\nx\n");
    sbx_result_free(r);
    /* Destroy deletes with the grace period. */
    char *id = strdup(sbx_sandbox_get0_id(g_sb));
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    pods = control_get("/_fake/pods");
    p = pod_record(pods, id);
    cr_assert_eq(json_object_get_int(jpath(p, "grace", NULL)), 2);
    json_object_put(pods);
    free(id);
}

static void sleep_s(double s)
{
    if (s > 0)
        usleep((useconds_t)(s * 1e6));
}

/* The lifetime counts from readiness, and the pod ends at its end: alive
 * 1 s before, gone (phase Failed, DeadlineExceeded) no earlier than the
 * lifetime after create returned, and long before the 360 s of the pod's
 * first deadline (the bound: 2 s of rounding, the fake kubelet's look every
 * 0.2 s, this loop's and a loaded machine's latency). */
Test(kubernetes, lifetime_ends_the_pod_counted_from_readiness)
{
    /* A slow start (1.5 s before the container runs) that the lifetime
     * must not include. */
    tu_fake_post("/_fake/config", "{\"pending_s\":0.5,\"creating_s\":1.0}");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 3, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    double ready = tu_now();
    sbx_error *err = NULL;
    sleep_s(ready + 2.0 - tu_now());
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 1, "gone %.2f s after create",
                 tu_now() - ready);
    sbx_result *r = tu_sh(g_sb, "echo still", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "still\n");
    sbx_result_free(r);
    int alive = 1;
    while (alive == 1 && tu_now() < ready + 12)
        if ((alive = sbx_sandbox_is_alive(g_sb, &err)) == 1)
            sleep_s(0.1);
    double took = tu_now() - ready;
    cr_assert_eq(alive, 0, "still alive %.2f s after create", took);
    cr_assert(took >= 3.0 && took < 8.0, "ended %.2f s after create (lifetime 3 s)", took);
    json_object *pods = control_get("/_fake/pods");
    json_object *p = pod_record(pods, sbx_sandbox_get0_id(g_sb));
    cr_assert_eq(json_object_get_int(jpath(p, "spec", "activeDeadlineSeconds", NULL)), 363);
    /* Lowered to the lifetime plus the seconds from status.startTime to
     * readiness, rounded up: at least the 1.5 s the start took here, at
     * most the seconds to the PATCH's arrival. */
    json_object *patches = jpath(p, "patches", NULL);
    cr_assert_eq(json_object_array_length(patches), 1);
    int patched = json_object_get_int(jpath(patches, "#0", "spec", "activeDeadlineSeconds",
                                            NULL));
    struct tm stm = { 0 };
    cr_assert_not_null(strptime(jstr(jpath(p, "start_time", NULL)), "%Y-%m-%dT%H:%M:%SZ", &stm));
    double since = json_object_get_double(jpath(patches, "#0", "at", NULL)) - (double)timegm(&stm);
    cr_assert(patched >= 3 + 2 && patched <= 3 + (int)ceil(since),
              "activeDeadlineSeconds %d, PATCH %.3f s after startTime", patched, since);
    json_object_put(pods);
}

/* RBAC without patch on pods: the create fails naming the call, and the
 * pod is deleted. */
Test(kubernetes, a_refused_deadline_patch_fails_create_and_deletes_the_pod)
{
    tu_fake_post("/_fake/faults",
                 "[{\"method\":\"PATCH\",\"path\":\"/pods/sbx-[0-9a-f]+$\",\"status\":403,"
                 "\"body\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
                 "\"status\":\"Failure\",\"message\":\"pods is forbidden: User \\\"u\\\" "
                 "cannot patch resource \\\"pods\\\"\",\"reason\":\"Forbidden\","
                 "\"code\":403}}]");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 60, NULL), 0);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    tu_assert_error(err, SBX_ERROR_AUTHENTICATION, NULL);
    const char *msg = sbx_error_get0_message(err);
    cr_assert(strstr(msg, "set the pod's activeDeadlineSeconds (RBAC: patch pods)"),
              "message: %s", msg);
    cr_assert(strstr(msg, "cannot patch resource \"pods\""), "message: %s", msg);
    json_object *pods = control_get("/_fake/pods");
    const char *id = sbx_error_get0_context(err, "sandbox_id");
    cr_assert_not_null(id);
    json_object *p = pod_record(pods, id);
    cr_assert_not_null(jpath(p, "deleted", NULL), "the pod was not deleted");
    cr_assert(json_object_get_double(jpath(p, "deleted", NULL)) > 0);
    json_object_put(pods);
    sbx_error_free(err);
}

/* No snapshots: the capability is not declared, and a snapshot_id at
 * create is refused naming it, before any pod is made. */
Test(kubernetes, no_snapshots_a_snapshot_id_is_refused)
{
    uint64_t caps = 0;
    sbx_error *err = NULL;
    cr_assert_eq(sbx_client_probe(g_client, &caps, &err), 0);
    cr_assert_eq(caps & SBX_CAP_SNAPSHOT, 0);
    json_object *before = control_get("/_fake/pods");
    size_t n0 = json_object_array_length(before);
    json_object_put(before);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_snapshot_id(o, "snap-1", NULL), 0);
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, NULL);
    cr_assert_str_eq(sbx_error_get0_message(err), "kubernetes backend: snapshot_id snap-1: "
                     "the kubernetes backend has no snapshots");
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "snapshot_id");
    sbx_error_free(err);
    json_object *after = control_get("/_fake/pods");
    cr_assert_eq(json_object_array_length(after), n0);
    json_object_put(after);
}

Test(kubernetes, no_internet_is_a_deny_egress_network_policy)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    char *id = strdup(sbx_sandbox_get0_id(g_sb));
    char *pname = tu_strdup_printf("%s-deny-egress", id);
    json_object *np = control_get("/_fake/networkpolicies");
    json_object *live = jpath(np, "live", NULL);
    cr_assert_eq(json_object_array_length(live), 1);
    json_object *pol = json_object_array_get_idx(live, 0);
    cr_assert_str_eq(jstr(jpath(pol, "metadata", "name", NULL)), pname);
    cr_assert_str_eq(jstr(jpath(pol, "metadata", "namespace", NULL)), "sbx-test");
    cr_assert_str_eq(jstr(jpath(pol, "spec", "podSelector", "matchLabels", "sandbox", NULL)), id);
    cr_assert_str_eq(jstr(jpath(pol, "spec", "policyTypes", "#0", NULL)), "Egress");
    cr_assert_eq(json_object_array_length(jpath(pol, "spec", "policyTypes", NULL)), 1);
    cr_assert_null(jpath(pol, "spec", "egress", NULL));
    cr_assert_str_eq(jstr(jpath(pol, "metadata", "labels", "sbx_backend", NULL)), "kubernetes");
    json_object_put(np);
    /* The pod has no network but loopback. */
    sbx_result *r = tu_sh(g_sb, "awk -F: 'NR > 2 { gsub(/ /, \"\", $1); print $1 }' "
                             "/proc/net/dev", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "lo\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    np = control_get("/_fake/networkpolicies");
    cr_assert_eq(json_object_array_length(jpath(np, "live", NULL)), 0);
    /* Its log (of the fake's whole run): this policy made, then deleted. */
    json_object *plog = jpath(np, "log", NULL);
    char ops[64] = "";
    for (size_t i = 0; i < json_object_array_length(plog); i++) {
        json_object *e = json_object_array_get_idx(plog, i);
        if (strcmp(jstr(jpath(e, "name", NULL)), pname) == 0)
            snprintf(ops + strlen(ops), sizeof ops - strlen(ops), "%s ",
                     jstr(jpath(e, "op", NULL)));
    }
    cr_assert_str_eq(ops, "create delete ");
    json_object_put(np);
    free(pname);
    free(id);
}

/* ------------------------------------------------------------------ terminal */

typedef struct out_acc {
    char buf[4096];
    size_t n;
} out_acc;

static void on_out(sbx_stream stream, const void *data, size_t len, void *ud)
{
    out_acc *a = ud;
    (void)stream;
    if (a->n + len < sizeof a->buf) {
        memcpy(a->buf + a->n, data, len);
        a->n += len;
        a->buf[a->n] = '\0';
    }
}

Test(kubernetes, terminal_takes_its_size_and_a_resize)
{
    g_sb = create_plain();
    out_acc acc = { .n = 0 };
    sbx_exec_request rq = { .struct_size = sizeof rq,
                            .shell = "stty size; read x; stty size",
                            .timeout_secs = 20, .on_output = on_out, .user_data = &acc,
                            .tty_rows = 30, .tty_cols = 100 };
    sbx_error *err = NULL;
    sbx_process *p = sbx_sandbox_start_process(g_sb, &rq, &err);
    cr_assert_not_null(p, "%s", err ? sbx_error_get0_message(err) : "");
    double until = tu_now() + 10;
    int code = -1;
    while (!strstr(acc.buf, "30 100") && tu_now() < until)
        sbx_process_wait(p, 0.1, &code, NULL, NULL);
    cr_assert(strstr(acc.buf, "30 100\r\n"), "output: %s", acc.buf);
    cr_assert_eq(sbx_process_resize(p, 40, 120, &err), 0);
    cr_assert_eq(sbx_process_write_stdin(p, "\n", 1, &err), 0);
    cr_assert_eq(sbx_process_wait(p, 15, &code, NULL, &err), 1, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(code, 0);
    cr_assert(strstr(acc.buf, "40 120\r\n"), "output: %s", acc.buf);
    sbx_process_free(p);
    json_object *execs = control_get("/_fake/execs");
    json_object *e = last_exec(execs, "stty size; read x; stty size");
    cr_assert_eq(jbool(e, "tty"), 1);
    json_object *rs = jpath(e, "resizes", NULL);
    size_t n = json_object_array_length(rs);
    cr_assert_geq(n, 2);
    cr_assert_eq(json_object_get_int(jpath(rs, "#0", "#0", NULL)), 100);
    cr_assert_eq(json_object_get_int(jpath(rs, "#0", "#1", NULL)), 30);
    cr_assert_eq(json_object_get_int(jpath(rs, "#1", "#0", NULL)), 120);
    cr_assert_eq(json_object_get_int(jpath(rs, "#1", "#1", NULL)), 40);
    json_object_put(execs);
}

/* ------------------------------------------------------------------ credentials */

/* A kubeconfig in g_tmp with @user_yaml as its one user's body (indented
 * four spaces), the fake's URL and CA: its path. */
static char *write_kubeconfig(const char *server, const char *user_yaml, const char *context)
{
    const char *dir = getenv("SBX_K8S_TEST_DIR");
    cr_assert_not_null(dir);
    char *ca = tu_strdup_printf("%s/ca.crt", dir);
    char *path = tu_strdup_printf("%s/kubeconfig", g_tmp);
    char *text = tu_strdup_printf(
        "apiVersion: v1\nkind: Config\ncurrent-context: %s\n"
        "clusters:\n- name: c\n  cluster:\n    server: %s\n    certificate-authority: %s\n"
        "users:\n- name: u\n  user:\n%s\n"
        "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n    namespace: sbx-test\n",
        context, server, ca, user_yaml);
    tu_write_file(path, text, strlen(text), 0600);
    free(text);
    free(ca);
    return path;
}

static sbx_client *client_for(const char *kubeconfig, sbx_error **err)
{
    char *cfg = tu_strdup_printf("{\"kubeconfig\":\"%s\"}", kubeconfig);
    sbx_client *c = sbx_client_new_with_config("kubernetes", SBX_PLUGIN_MODE_DEFAULT, cfg, err);
    free(cfg);
    return c;
}

Test(kubernetes, bearer_token_with_the_cluster_ca)
{
    char *kc = write_kubeconfig(getenv("SBX_K8S_FAKE_URL"), "    token: sbx-test-dummy-key", "t");
    sbx_error *err = NULL;
    sbx_client *c = client_for(kc, &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_options *o = sbx_options_new();
    sbx_sandbox *sb = sbx_sandbox_create(c, o, &err);
    sbx_options_free(o);
    cr_assert_not_null(sb, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_result *r = tu_sh(sb, "echo via-token", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "via-token\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    /* The token went as a bearer credential (the log redacts it). */
    json_object *log = tu_fake_log();
    int bearer = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        const char *auth = tu_json_str(json_object_array_get_idx(log, i), "auth");
        if (auth && strcmp(auth, "Bearer <redacted>") == 0)
            bearer++;
    }
    cr_assert_geq(bearer, 3, "requests with the bearer token: %d", bearer);
    json_object_put(log);
    /* A wrong token is refused: authentication. */
    free(kc);
    kc = write_kubeconfig(getenv("SBX_K8S_FAKE_URL"), "    token: wrong", "t");
    c = client_for(kc, &err);
    cr_assert_not_null(c);
    o = sbx_options_new();
    cr_assert_null(sbx_sandbox_create(c, o, &err));
    sbx_options_free(o);
    tu_assert_error(err, SBX_ERROR_AUTHENTICATION, NULL);
    cr_assert_null(strstr(sbx_error_get0_message(err), "wrong"), "%s",
                   sbx_error_get0_message(err));
    sbx_error_free(err);
    sbx_client_free(c);
    free(kc);
}

static void kubeconfig_error(const char *user_yaml, const char *context, const char *want_sub,
                             const char *ctx_key, const char *ctx_val)
{
    char *kc = write_kubeconfig(getenv("SBX_K8S_FAKE_URL"), user_yaml, context);
    sbx_error *err = NULL;
    cr_assert_null(client_for(kc, &err));
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, NULL);
    const char *msg = sbx_error_get0_message(err);
    char *want = tu_strdup_printf(want_sub, kc);
    cr_assert(strstr(msg, want), "message: %s\nwanted: %s", msg, want);
    if (ctx_key)
        cr_assert_str_eq(sbx_error_get0_context(err, ctx_key), ctx_val);
    free(want);
    sbx_error_free(err);
    free(kc);
}

Test(kubernetes, kubeconfig_errors_name_the_bad_value)
{
    kubeconfig_error("    token: x", "nosuch",
                     "kubernetes backend: context \"nosuch\" is not in the kubeconfig %s",
                     "context", "nosuch");
    kubeconfig_error("    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
                     "      command: aws-iam-authenticator", "t",
                     "kubernetes backend: user \"u\" in %s gets its credential from an exec "
                     "plugin (aws-iam-authenticator), which this backend does not run",
                     "user", "u");
    kubeconfig_error("    client-certificate-data: '%%%%not base64'\n"
                     "    client-key-data: '%%%%'", "t",
                     "kubernetes backend: users[u].client-certificate-data in %s is not base64",
                     "option", "client-certificate-data");
    kubeconfig_error("    username: a\n    password: b", "t",
                     "kubernetes backend: user \"u\" in %s uses basic authentication", "user",
                     "u");
}

Test(kubernetes, kubeconfig_that_is_not_yaml_names_the_line)
{
    char *path = tu_strdup_printf("%s/bad", g_tmp);
    const char *text = "apiVersion: v1\nclusters: [\n";
    tu_write_file(path, text, strlen(text), 0600);
    sbx_error *err = NULL;
    cr_assert_null(client_for(path, &err));
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, NULL);
    char *want = tu_strdup_printf("kubernetes backend: the kubeconfig %s is not YAML: ", path);
    cr_assert(strncmp(sbx_error_get0_message(err), want, strlen(want)) == 0, "message: %s",
              sbx_error_get0_message(err));
    cr_assert(strstr(sbx_error_get0_message(err), " at line 3"), "message: %s",
              sbx_error_get0_message(err));
    free(want);
    sbx_error_free(err);
    free(path);
}

/* Writes @text to DIR/NAME (DIR made when missing): the path. */
static char *put_file(const char *dir, const char *name, const char *text)
{
    if (mkdir(dir, 0700) != 0)
        cr_assert_eq(errno, EEXIST, "mkdir %s: %s", dir, strerror(errno));
    char *path = tu_strdup_printf("%s/%s", dir, name);
    tu_write_file(path, text, strlen(text), 0600);
    return path;
}

Test(kubernetes, kubeconfig_files_of_KUBECONFIG_are_merged_as_kubectl_does)
{
    /* a/config: the cluster "c" (the fake, its CA by a path relative to
     * a/), no current-context. b/config: current-context "t", the
     * context "t", the user "u" (a tokenFile relative to b/) and a cluster
     * "c" of its own that must lose to a's. c/config: current-context
     * "other" and a user "u" with a wrong token, both losing to b's.
     * KUBECONFIG also names a file that does not exist, and a/config
     * twice. */
    const char *tdir = getenv("SBX_K8S_TEST_DIR");
    cr_assert_not_null(tdir);
    char *da = tu_strdup_printf("%s/a", g_tmp), *db = tu_strdup_printf("%s/b", g_tmp),
         *dc = tu_strdup_printf("%s/c", g_tmp);
    char *cafile = tu_strdup_printf("%s/ca.crt", tdir);
    char ca[16384];
    FILE *f = fopen(cafile, "rb");
    cr_assert_not_null(f);
    size_t calen = fread(ca, 1, sizeof ca - 1, f);
    fclose(f);
    cr_assert_gt(calen, 0);
    ca[calen] = '\0';
    free(put_file(da, "ca.crt", ca));
    free(cafile);
    char *t = tu_strdup_printf("apiVersion: v1\nkind: Config\n"
                               "clusters:\n- name: c\n  cluster:\n    server: %s\n"
                               "    certificate-authority: ca.crt\n",
                               getenv("SBX_K8S_FAKE_URL"));
    char *a = put_file(da, "config", t);
    free(t);
    free(put_file(db, "tok", "sbx-test-dummy-key\n"));
    char *b = put_file(db, "config",
                       "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                       "clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"
                       "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n"
                       "    namespace: sbx-merged\n"
                       "users:\n- name: u\n  user:\n    tokenFile: tok\n");
    char *c = put_file(dc, "config",
                       "apiVersion: v1\nkind: Config\ncurrent-context: other\n"
                       "contexts:\n- name: other\n  context:\n    cluster: c\n    user: u\n"
                       "users:\n- name: u\n  user:\n    token: wrong\n");
    char *env = tu_strdup_printf("%s/nosuch::%s:%s:%s:%s", g_tmp, a, b, a, c);
    setenv("KUBECONFIG", env, 1);
    sbx_error *err = NULL;
    sbx_client *cl = sbx_client_new("kubernetes", &err);
    cr_assert_not_null(cl, "%s", err ? sbx_error_get0_message(err) : "");
    /* The pod is in the namespace of b's context "t". */
    assert_runs_in_namespace(cl, "merged", "sbx-merged");
    sbx_client_free(cl);
    free(env);

    /* A file of the list that is not YAML is named, even after good ones. */
    char *bad = put_file(dc, "bad", "apiVersion: v1\nclusters: [\n");
    env = tu_strdup_printf("%s:%s", a, bad);
    setenv("KUBECONFIG", env, 1);
    cr_assert_null(sbx_client_new("kubernetes", &err));
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, NULL);
    char *want = tu_strdup_printf("kubernetes backend: the kubeconfig %s is not YAML: ", bad);
    cr_assert(strncmp(sbx_error_get0_message(err), want, strlen(want)) == 0, "message: %s",
              sbx_error_get0_message(err));
    sbx_error_clear(&err);
    free(want);
    free(env);
    /* None of the files exists: KUBECONFIG is named. */
    env = tu_strdup_printf("%s/x:%s/y", g_tmp, g_tmp);
    setenv("KUBECONFIG", env, 1);
    cr_assert_null(sbx_client_new("kubernetes", &err));
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, NULL);
    want = tu_strdup_printf("kubernetes backend: no file of KUBECONFIG=%s exists", env);
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), env);
    sbx_error_free(err);
    free(want);
    free(env);
    free(bad);
    free(a);
    free(b);
    free(c);
    free(da);
    free(db);
    free(dc);
}

Test(kubernetes, in_cluster_service_account_token_and_ca)
{
    /* In a pod: KUBERNETES_SERVICE_HOST/_PORT and the service account's
     * token, ca.crt and namespace (the directory moved here for the test
     * by SBX_K8S_SERVICEACCOUNT_DIR). No kubeconfig is read. */
    const char *dir = getenv("SBX_K8S_TEST_DIR");
    const char *url = getenv("SBX_K8S_FAKE_URL");
    int port = 0;
    cr_assert(url && sscanf(url, "https://127.0.0.1:%d", &port) == 1);
    char *sa = tu_strdup_printf("%s/sa", g_tmp);
    cr_assert_eq(mkdir(sa, 0700), 0);
    char *src = tu_strdup_printf("%s/ca.crt", dir);
    FILE *f = fopen(src, "rb");
    cr_assert_not_null(f);
    char ca[8192];
    size_t n = fread(ca, 1, sizeof ca, f);
    fclose(f);
    char *p = tu_strdup_printf("%s/ca.crt", sa);
    tu_write_file(p, ca, n, 0644);
    free(p);
    p = tu_strdup_printf("%s/token", sa);
    tu_write_file(p, "sbx-test-dummy-key\n", 19, 0600);
    free(p);
    p = tu_strdup_printf("%s/namespace", sa);
    tu_write_file(p, "sbx-incluster\n", 14, 0644);
    free(p);
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", ports, 1);
    setenv("SBX_K8S_SERVICEACCOUNT_DIR", sa, 1);
    unsetenv("KUBECONFIG");
    setenv("HOME", g_tmp, 1);       /* no ~/.kube/config */
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_config("kubernetes", SBX_PLUGIN_MODE_DEFAULT,
                                               "{\"in_cluster\":true}", &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    /* The pod went to the service account's namespace. */
    assert_runs_in_namespace(c, "in-cluster", "sbx-incluster");
    sbx_client_free(c);
    free(src);
    free(sa);
}

typedef struct owned_acc {
    char ids[16][64];
    int n;
} owned_acc;

static int on_owned(const sbx_owned_sandbox *o, void *ud)
{
    owned_acc *a = ud;
    if (a->n < 16)
        snprintf(a->ids[a->n++], 64, "%s", o->id);
    return 0;
}

static int owned_has(const owned_acc *a, const char *id)
{
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->ids[i], id) == 0)
            return 1;
    return 0;
}

Test(kubernetes, only_labelled_pods_and_policies_are_listed_and_destroyed)
{
    const char *hdr = "Authorization: Bearer sbx-test-dummy-key";
    /* A pod this library did not make (no labels): never listed, and
     * destroy_by_id refuses it. */
    const char *foreign =
        "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"not-ours\"},"
        "\"spec\":{\"securityContext\":{\"runAsNonRoot\":true,\"runAsUser\":1000,"
        "\"seccompProfile\":{\"type\":\"RuntimeDefault\"}},\"containers\":[{\"name\":"
        "\"sandbox\",\"image\":\"x\",\"securityContext\":{\"allowPrivilegeEscalation\":false,"
        "\"capabilities\":{\"drop\":[\"ALL\"]}}}]}}";
    cr_assert_eq(tu_fake_http("POST", "/api/v1/namespaces/sbx-test/pods", hdr, foreign, NULL),
                 201);
    /* A deny-egress policy left by a create that ended before its pod was
     * made: listed by its pod's name, and destroyed. */
    const char *orphan =
        "{\"apiVersion\":\"networking.k8s.io/v1\",\"kind\":\"NetworkPolicy\",\"metadata\":"
        "{\"name\":\"sbx-0000deadbeef-deny-egress\",\"labels\":{\"sbx_backend\":\"kubernetes\","
        "\"sbx_create_token\":\"sbx-00000000000000000000000000000001\",\"sandbox\":"
        "\"sbx-0000deadbeef\"}},\"spec\":{\"podSelector\":{\"matchLabels\":{\"sandbox\":"
        "\"sbx-0000deadbeef\"}},\"policyTypes\":[\"Egress\"]}}";
    cr_assert_eq(tu_fake_http("POST", "/apis/networking.k8s.io/v1/namespaces/sbx-test/"
                              "networkpolicies", hdr, orphan, NULL), 201);
    g_sb = create_plain();
    owned_acc a = { .n = 0 };
    sbx_error *err = NULL;
    cr_assert_geq(sbx_client_list_owned(g_client, on_owned, &a, &err), 2, "%s",
                  err ? sbx_error_get0_message(err) : "");
    cr_assert(owned_has(&a, sbx_sandbox_get0_id(g_sb)));
    cr_assert(owned_has(&a, "sbx-0000deadbeef"));
    cr_assert(!owned_has(&a, "not-ours"));
    cr_assert_eq(sbx_client_destroy_by_id(g_client, "not-ours", &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL);
    cr_assert_str_eq(sbx_error_get0_message(err), "kubernetes backend: pod not-ours does not "
                     "carry this library's labels");
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(sbx_client_destroy_by_id(g_client, "sbx-0000deadbeef", &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    json_object *np = control_get("/_fake/networkpolicies");
    json_object *live = jpath(np, "live", NULL);
    for (size_t i = 0; i < json_object_array_length(live); i++)
        cr_assert_str_neq(jstr(jpath(json_object_array_get_idx(live, i), "metadata", "name",
                                     NULL)),
                          "sbx-0000deadbeef-deny-egress");
    json_object_put(np);
    cr_assert_eq(tu_fake_http("DELETE", "/api/v1/namespaces/sbx-test/pods/not-ours?"
                              "gracePeriodSeconds=0", hdr, NULL, NULL), 200);
}

Test(kubernetes, a_pod_security_refusal_is_a_configuration_error_and_rbac_is_authentication)
{
    tu_fake_post("/_fake/faults",
                 "[{\"method\":\"POST\",\"path\":\"/pods$\",\"status\":403,\"body\":"
                 "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"
                 "\"Failure\",\"message\":\"pods \\\"x\\\" is forbidden: violates PodSecurity "
                 "\\\"restricted:latest\\\": seccompProfile\",\"reason\":\"Forbidden\","
                 "\"code\":403}},"
                 "{\"method\":\"POST\",\"path\":\"/pods$\",\"status\":403,\"body\":"
                 "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"
                 "\"Failure\",\"message\":\"pods is forbidden: User \\\"u\\\" cannot create "
                 "resource \\\"pods\\\"\",\"reason\":\"Forbidden\",\"code\":403}}]");
    sbx_options *o = sbx_options_new();
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, NULL);
    cr_assert(strstr(sbx_error_get0_message(err), "violates PodSecurity \"restricted:latest\""),
              "%s", sbx_error_get0_message(err));
    sbx_error_free(err);
    err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    tu_assert_error(err, SBX_ERROR_AUTHENTICATION, NULL);
    cr_assert(strstr(sbx_error_get0_message(err), "cannot create resource \"pods\""), "%s",
              sbx_error_get0_message(err));
    sbx_error_free(err);
    sbx_options_free(o);
}
