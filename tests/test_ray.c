/*
 * test_ray.c — what only the ray backend does, through its contract fake of
 * Ray's Jobs API (tests/ray.sh starts it and runs this program with
 * SBX_TEST_BACKEND=ray): the last line of a command is never lost, also
 * when the job's log lags its status (CASE-24, ten runs at once); stdout
 * and stderr come apart out of the merged job log, byte-exact; each
 * command is one job whose record is deleted once read, carrying cpu and
 * gpu as entrypoint resources and stdin as a working_dir package; the
 * sandbox's variables; a timeout stops the job; destroy removes the
 * directory create made and keeps the caller's workdir; the token comes
 * from RAY_AUTH_TOKEN or the file RAY_AUTH_TOKEN_PATH names (one that
 * cannot be read is a configuration error naming it), and none is an
 * authentication error; a plain-text error answer is reported with its
 * text; memory_mb goes as entrypoint_memory and the driver kills a command
 * past it (exit 137, the OOM flag), also once resumed from its session
 * state, the backend option entrypoint_memory_mb
 * only reserves and is refused beside memory_mb; a
 * command too long for an entrypoint travels in the package; the job that
 * made a sandbox is its label and holds no env value; a submit whose answer
 * was lost is sent again and the command runs once; the plugin's own jobs
 * take none of the sandbox's resources; a process freed while it runs leaves
 * no job, nor does one freed while its job's submit is in flight; a free
 * on a cluster not answering keeps the client's call timeout; a command's
 * output comes through the log's tail WebSocket while
 * it runs, the log never polled; the lifetime is a job of the plugin's own
 * that ends the sandbox (a 2 s one leaves nothing by 4 s, calls after it
 * are not_found naming the expiry) and that destroy stops; a destroy on a
 * cluster not answering keeps its call timeout; a process freed with its
 * stdin still open leaves no job.
 */
#include "testutil.h"

#include <criterion/criterion.h>

#include <json-c/json.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sbx/sbx.h>

static sbx_client *g_client;
static sbx_sandbox *g_sb;

static void setup(void)
{
    sbx_error *err = NULL;
    cr_assert_str_eq(tu_backend(), "ray", "run by tests/ray.sh");
    tu_fake_use("RAY_ADDRESS");
    tu_fake_reset();
    tu_fake_post("/_fake/config", "{\"log_lag_s\": 0, \"lose_submit_answers\": 0}");
    g_client = sbx_client_new("ray", &err);
    cr_assert_not_null(g_client, "sbx_client_new: %s", err ? sbx_error_get0_message(err) : "");
    g_sb = NULL;
}

static void teardown(void)
{
    tu_fake_post("/_fake/config", "{\"log_lag_s\": 0, \"lose_submit_answers\": 0}");
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    sbx_client_free(g_client);
}

TestSuite(ray, .init = setup, .fini = teardown, .timeout = 90);

/* The fake node's directory on this host. */
static char *node_root(void)
{
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", "/_fake/node", NULL, NULL, &body), 200);
    json_object *j = json_tokener_parse(body);
    char *root = strdup(tu_json_str(j, "root"));
    json_object_put(j);
    free(body);
    return root;
}

/* 1 when the node path @path exists. */
static int on_node(const char *path)
{
    char *root = node_root(), *p = tu_strdup_printf("%s%s", root, path);
    int there = tu_exists(p);
    free(p);
    free(root);
    return there;
}

/* The bodies of the job submissions in the fake's log, parsed (a new
 * array). */
static json_object *submissions(void)
{
    json_object *log = tu_fake_log(), *out = json_object_new_array();
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i);
        const char *m = tu_json_str(e, "method"), *p = tu_json_str(e, "path");
        if (strcmp(m, "POST") == 0 && strcmp(p, "/api/jobs/") == 0)
            json_object_array_add(out, json_tokener_parse(tu_json_str(e, "body")));
    }
    json_object_put(log);
    return out;
}

/* ------------------------------------------------------------- CASE-24 */

typedef struct case24_run {
    sbx_sandbox *sb;
    char streamed[256];
    size_t streamed_len;
    int chunk_after_end;
    int ended;
    sbx_result *r;
    char err[512];
} case24_run;

static void case24_chunk(sbx_stream stream, const void *data, size_t len, void *ud)
{
    case24_run *run = ud;
    if (run->ended)
        run->chunk_after_end = 1;
    if (stream == SBX_STREAM_STDOUT && run->streamed_len + len <= sizeof run->streamed) {
        memcpy(run->streamed + run->streamed_len, data, len);
        run->streamed_len += len;
    }
}

static void *case24_thread(void *arg)
{
    case24_run *run = arg;
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "python3 -c \"import time; print('hello', flush=True); time.sleep(2); "
                "print('world', flush=True); time.sleep(2); print('last-line')\"";
    req.timeout_secs = 30;
    req.on_output = case24_chunk;
    req.user_data = run;
    sbx_error *err = NULL;
    run->r = sbx_sandbox_execute_command(run->sb, &req, &err);
    run->ended = 1;
    if (!run->r)
        snprintf(run->err, sizeof run->err, "%s", err ? sbx_error_get0_message(err) : "?");
    sbx_error_free(err);
    return NULL;
}

/* CASE-24: ten runs at once, the job's log holding its last line back for
 * 0.5 s after the job ended (the fake's log_lag_s): every run ends with
 * exactly "hello\nworld\nlast-line\n", streamed whole before the end. */
Test(ray, case24_last_line_is_never_lost)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_post("/_fake/config", "{\"log_lag_s\": 0.5}");
    case24_run runs[10];
    pthread_t th[10];
    memset(runs, 0, sizeof runs);
    for (int i = 0; i < 10; i++) {
        runs[i].sb = g_sb;
        cr_assert_eq(pthread_create(&th[i], NULL, case24_thread, &runs[i]), 0);
    }
    for (int i = 0; i < 10; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 10; i++) {
        cr_assert_not_null(runs[i].r, "run %d: %s", i, runs[i].err);
        tu_assert_exit(runs[i].r, 0);
        tu_assert_stdout(runs[i].r, "hello\nworld\nlast-line\n");
        tu_assert_stderr(runs[i].r, "");
        tu_assert_bytes("streamed", runs[i].streamed, runs[i].streamed_len,
                        "hello\nworld\nlast-line\n", 22);
        cr_assert_eq(runs[i].chunk_after_end, 0, "run %d: a chunk came after the end", i);
        sbx_result_free(runs[i].r);
    }
}

/* ------------------------------------------------------------- jobs */

/* Ray merges a job's stdout and stderr into one text log; they come back
 * apart, in order within each stream, with every byte value. */
Test(ray, streams_come_apart_out_of_the_merged_log)
{
    g_sb = tu_create(g_client, NULL);
    sbx_result *r = tu_sh(g_sb, "for i in 1 2 3; do echo out$i; echo err$i >&2; done; "
                                "printf '\\000\\377\\n' >&2; printf 'no newline'", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "out1\nout2\nout3\nno newline");
    tu_assert_stderr_bytes(r, "err1\nerr2\nerr3\n\000\377\n", 18);
    sbx_result_free(r);
}

/* One job per command: its submission carries the entrypoint resources
 * of the create's cpu and gpu, a submission_id of the plugin's, the
 * backend's metadata and the call's env as one runtime_env variable; the
 * job's record is deleted once read. */
Test(ray, each_command_is_one_job_with_the_sandbox_resources)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 2.0, NULL), 0);
    cr_assert_eq(sbx_options_set_gpu(o, "1", NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    tu_fake_reset();
    const char *env[] = { "GREETING=hi there", NULL };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo \"$GREETING\"";
    req.env = env;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "hi there\n");
    sbx_result_free(r);
    json_object *subs = submissions();
    cr_assert_eq(json_object_array_length(subs), 1);
    json_object *b = json_object_array_get_idx(subs, 0), *v = NULL;
    cr_assert_not_null(tu_json_str(b, "submission_id"));
    char *sid = strdup(tu_json_str(b, "submission_id"));
    cr_assert_eq(strncmp(sid, "sbx-", 4), 0, "submission_id %s", sid);
    cr_assert_eq(strlen(sid), 28, "submission_id %s", sid);
    cr_assert(json_object_object_get_ex(b, "entrypoint_num_cpus", &v));
    cr_assert(json_object_get_double(v) == 2.0);
    cr_assert(json_object_object_get_ex(b, "entrypoint_num_gpus", &v));
    cr_assert(json_object_get_double(v) == 1.0);
    json_object *meta = NULL, *renv = NULL, *ev = NULL;
    cr_assert(json_object_object_get_ex(b, "metadata", &meta));
    cr_assert_str_eq(tu_json_str(meta, "sbx_backend"), "ray");
    cr_assert_str_eq(tu_json_str(meta, "sbx_sandbox"), sbx_sandbox_get0_id(g_sb));
    cr_assert(json_object_object_get_ex(b, "runtime_env", &renv));
    cr_assert(json_object_object_get_ex(renv, "env_vars", &ev));
    cr_assert_eq(json_object_object_length(ev), 1);
    cr_assert_not_null(tu_json_str(ev, "SBX_RAY_CALL_ENV"));
    cr_assert_null(strstr(json_object_to_json_string(b), "hi there"),
                   "the env value is in the submission as text");
    json_object *log = tu_fake_log();
    char *del = tu_strdup_printf("/api/jobs/%s", sid);
    cr_assert_eq(tu_fake_count(log, "DELETE", del, NULL, 0), 1);
    free(del);
    json_object_put(log);
    json_object_put(subs);
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", "/_fake/jobs", NULL, NULL, &body), 200);
    json_object *jobs = json_tokener_parse(body);
    cr_assert_null(json_object_object_get(jobs, sid), "job %s is still on the cluster", sid);
    json_object_put(jobs);
    free(body);
    free(sid);
}

/* stdin travels as a working_dir package (a zip PUT to
 * /api/packages/gcs/), the job's runtime_env.working_dir. */
Test(ray, stdin_is_a_working_dir_package)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "wc -c; ls";
    req.stdin_data = "twelve bytes";
    req.stdin_len = 12;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "12\ntmp\n");
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "PUT", "/api/packages/gcs/_ray_pkg_[0-9a-f]{32}\\.zip", NULL,
                               0), 1);
    json_object_put(log);
    json_object *subs = submissions(), *renv = NULL;
    cr_assert_eq(json_object_array_length(subs), 1);
    cr_assert(json_object_object_get_ex(json_object_array_get_idx(subs, 0), "runtime_env",
                                        &renv));
    const char *wd = tu_json_str(renv, "working_dir");
    cr_assert_not_null(wd);
    cr_assert_eq(strncmp(wd, "gcs://_ray_pkg_", 15), 0, "working_dir %s", wd);
    json_object_put(subs);
}

/* A command runs in the sandbox's directory, which is its HOME and
 * SANDBOX_ROOT, with TMPDIR under it; a per-call cwd is under it too. */
Test(ray, commands_run_in_the_sandbox_directory)
{
    g_sb = tu_create(g_client, NULL);
    const char *root = sbx_sandbox_get0_root(g_sb);
    char *want = tu_strdup_printf("/tmp/sbx-ray/%s", sbx_sandbox_get0_id(g_sb));
    cr_assert_str_eq(root, want);
    sbx_result *r = tu_sh(g_sb, "pwd; echo \"$HOME|$SANDBOX_ROOT|$TMPDIR\"", 30);
    tu_assert_exit(r, 0);
    char *out = tu_strdup_printf("%s\n%s|%s|%s/tmp\n", want, want, want, want);
    tu_assert_stdout(r, out);
    sbx_result_free(r);
    free(out);
    free(want);
}

/* A timeout ends the command with 124 and stops its job. */
Test(ray, a_timeout_stops_the_job)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    sbx_result *r = tu_sh(g_sb, "trap '' TERM; sleep 60", 1);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    sbx_result_free(r);
    json_object *subs = submissions();
    const char *sid = tu_json_str(json_object_array_get_idx(subs, 0), "submission_id");
    json_object *log = tu_fake_log();
    char *stop = tu_strdup_printf("/api/jobs/%s/stop", sid);
    cr_assert_eq(tu_fake_count(log, "POST", stop, NULL, 0), 1);
    free(stop);
    json_object_put(log);
    json_object_put(subs);
    r = tu_sh(g_sb, "ps -eo args | grep -c '^sleep 60$'", 30);
    tu_assert_stdout(r, "0\n");
    sbx_result_free(r);
}

/* destroy removes the directory create made and the sandbox's own files;
 * a caller's workdir stays. */
Test(ray, destroy_removes_what_create_made)
{
    g_sb = tu_create(g_client, NULL);
    char *dir = strdup(sbx_sandbox_get0_root(g_sb));
    char *meta = tu_strdup_printf("%s.sbx", dir);
    cr_assert(on_node(dir) && on_node(meta));
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    cr_assert(!on_node(dir), "%s is still on the node", dir);
    cr_assert(!on_node(meta), "%s is still on the node", meta);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;

    char *wd = tu_strdup_printf("/work/ray-wd-%d", (int)getpid());
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workdir(o, wd, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    cr_assert_str_eq(sbx_sandbox_get0_root(g_sb), wd);
    sbx_result *r = tu_sh(g_sb, "echo kept > f", 30);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    char *f = tu_strdup_printf("%s/f", wd);
    cr_assert(on_node(f), "destroy removed the caller's workdir");
    free(f);
    free(wd);
    free(dir);
    free(meta);
}

/* ------------------------------------------------------------- lifetime */

/* The fake's record of job @sid (a new object), or NULL when it has none. */
static json_object *fake_job(const char *sid)
{
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", "/_fake/jobs", NULL, NULL, &body), 200);
    json_object *jobs = json_tokener_parse(body), *j = NULL;
    free(body);
    if (json_object_object_get_ex(jobs, sid, &j))
        json_object_get(j);
    json_object_put(jobs);
    return j;
}

/*
 * A 2 s lifetime: create submits the lifetime job (ID-lifetime, a shell
 * without the driver, metadata sbx_kind=lifetime, none of the sandbox's
 * resources), which runs; by 4 s after create the sandbox's directory, its
 * files and a background command of it are gone; a command then is
 * not_found "sandbox ID expired at T (lifetime 2 s)" with T its expiry, as
 * is a resume from its session state, which also deletes what is left on
 * the cluster: the label and the lifetime job's record.
 */
/* How many processes of this host mention @s (as tu_procs_mentioning). */
static size_t procs(const char *s)
{
    pid_t pids[64];
    return tu_procs_mentioning(s, pids, 64);
}

Test(ray, a_two_second_lifetime_ends_the_sandbox)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 2.0, NULL), 0);
    cr_assert_eq(sbx_options_set_timeout_secs(o, 2.0, NULL), 0);
    double wall0 = (double)time(NULL);
    g_sb = tu_create(g_client, o);
    double t0 = tu_now();
    sbx_options_free(o);
    char *id_copy = strdup(sbx_sandbox_get0_id(g_sb));
    const char *id = id_copy;
    char *dir = strdup(sbx_sandbox_get0_root(g_sb));
    char *meta = tu_strdup_printf("%s.sbx", dir);
    char *life = tu_strdup_printf("%s-lifetime", id);
    char *state = sbx_sandbox_session_state(g_sb, NULL);
    cr_assert_not_null(state);

    json_object *subs = submissions(), *b = NULL;
    for (size_t i = 0; i < json_object_array_length(subs); i++) {
        json_object *x = json_object_array_get_idx(subs, i);
        if (strcmp(tu_json_str(x, "submission_id"), life) == 0)
            b = x;
    }
    cr_assert_not_null(b, "no lifetime job %s among the submissions", life);
    const char *entry = tu_json_str(b, "entrypoint");
    cr_assert_eq(strncmp(entry, "sh -c 'sleep 3.000 || exit 0", 28), 0, "entrypoint %s", entry);
    json_object *m = NULL, *v = NULL;
    cr_assert(json_object_object_get_ex(b, "metadata", &m));
    cr_assert_str_eq(tu_json_str(m, "sbx_backend"), "ray");
    cr_assert_str_eq(tu_json_str(m, "sbx_kind"), "lifetime");
    cr_assert_str_eq(tu_json_str(m, "sbx_sandbox"), id);
    cr_assert_eq(json_object_object_get_ex(b, "entrypoint_num_cpus", &v), 0);
    json_object_put(subs);

    sbx_result *r = tu_sh(g_sb, "sleep 4321.5 >/dev/null 2>&1 & echo started", 30);
    tu_assert_stdout(r, "started\n");
    sbx_result_free(r);
    cr_assert(on_node(dir) && on_node(meta));
    cr_assert_gt(procs("4321.5"), 0, "no background command");
    json_object *job = fake_job(life);
    cr_assert_not_null(job);
    cr_assert(strcmp(tu_json_str(job, "status"), "RUNNING") == 0
              || strcmp(tu_json_str(job, "status"), "PENDING") == 0, "lifetime job %s",
              tu_json_str(job, "status"));
    json_object_put(job);

    double took;
    for (;;) {
        took = tu_now() - t0;
        if (!on_node(dir) && !on_node(meta) && procs("4321.5") == 0)
            break;
        cr_assert_leq(took, 4.0, "%.2f s after create: dir %d, files %d, command %zu", took,
                      on_node(dir), on_node(meta), procs("4321.5"));
        usleep(50 * 1000);
    }
    fprintf(stderr, "# ray: nothing of the sandbox left %.3f s after create (lifetime 2 s)\n",
            took);
    cr_assert_geq(took, 2.0, "the sandbox ended %.3f s after create, before its lifetime", took);

    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "true";
    req.timeout_secs = 30;
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    char *want = tu_assert_expired(err, id, wall0, took, 2.0);
    sbx_error_free(err);
    err = NULL;
    /* What is left: the label (the create job's record, with the expiry
     * sbx_gc() reads) and the lifetime job's record. */
    char *path = tu_strdup_printf("/api/jobs/%s", id), *body = NULL;
    const char *auth = "Authorization: Bearer sbx-test-dummy-key";
    cr_assert_eq(tu_fake_http("GET", path, auth, NULL, &body), 200);
    free(body);
    body = NULL;
    job = fake_job(life);
    cr_assert_not_null(job, "no record of the lifetime job %s", life);
    cr_assert_str_eq(tu_json_str(job, "status"), "SUCCEEDED");
    json_object_put(job);
    /* A resume (as sbx_gc() reaps an expired row) says the same and
     * removes both. */
    cr_assert_null(sbx_sandbox_resume(g_client, state, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND, "%s", sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    sbx_error_free(err);
    cr_assert_eq(tu_fake_http("GET", path, auth, NULL, &body), 404, "the label stays: %s", body);
    free(body);
    job = fake_job(life);
    cr_assert_null(job, "the lifetime job's record stays: %s", json_object_to_json_string(job));
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    free(id_copy);
    free(path);
    free(want);
    free(state);
    free(life);
    free(meta);
    free(dir);
}

/* Destroy before the expiry stops the lifetime job (its sleep ends) and
 * deletes its record. */
Test(ray, destroy_stops_the_lifetime_job)
{
    g_sb = tu_create(g_client, NULL);
    char *life = tu_strdup_printf("%s-lifetime", sbx_sandbox_get0_id(g_sb));
    json_object *job = NULL;
    /* Submitted, not followed: it starts a moment after create returned. */
    for (double t0 = tu_now(); tu_now() - t0 < 5.0; usleep(20 * 1000)) {
        json_object_put(job);
        job = fake_job(life);
        cr_assert_not_null(job, "no lifetime job %s", life);
        if (strcmp(tu_json_str(job, "status"), "RUNNING") == 0 && procs("601.000") > 0)
            break;
    }
    cr_assert_str_eq(tu_json_str(job, "status"), "RUNNING");
    json_object_put(job);
    cr_assert_gt(procs("601.000"), 0, "the lifetime job's sleep does not run");
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    job = fake_job(life);
    cr_assert_null(job, "the lifetime job's record stays: %s", json_object_to_json_string(job));
    double t0 = tu_now();
    while (procs("601.000") > 0 && tu_now() - t0 < 5.0)
        usleep(20 * 1000);
    cr_assert_eq(procs("601.000"), 0,
                 "the lifetime job's sleep outlived the destroy");
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    free(life);
}

/* A destroy with a call timeout on a cluster that drops every request
 * ends within the timeout and the lost look's CL_LOST_LOOK_S (0.5 s), for
 * the lifetime job's reap and for the removal job's: the reap is bounded by
 * the call, not by its own 30 s (the destroy took 29.4 s in process, and
 * out of process the plugin host was killed 2 s past the deadline). */
Test(ray, a_destroy_on_a_cluster_not_answering_keeps_its_call_timeout)
{
    g_sb = tu_create(g_client, NULL);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 2, &err), 0);
    tu_fake_post("/_fake/faults", "[{\"path\": \"^/api/\", \"action\": \"drop\", "
                 "\"times\": -1}]");
    double t0 = tu_now();
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), -1);
    double took = tu_now() - t0;
    tu_fake_post("/_fake/faults", "[]");
    cr_assert_lt(took, 3.5, "destroy took %.2f s: %s", took, sbx_error_get0_message(err));
    tu_assert_error(err, SBX_ERROR_TIMEOUT, NULL);
    cr_assert_null(strstr(sbx_error_get0_message(err), "was killed"), "%s",
                   sbx_error_get0_message(err));
    sbx_error_free(err);
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 0, NULL), 0);
}

/* ------------------------------------------------------------- auth, errors */

/* The token from the file RAY_AUTH_TOKEN_PATH names works; with no token
 * the cluster's 401 is an authentication error carrying its text. Every
 * request carried "Bearer" (the fake logs it redacted). */
Test(ray, token_from_file_and_missing_token)
{
    char *dir = tu_fresh_tmpdir();
    char *path = tu_strdup_printf("%s/token", dir);
    tu_write_file(path, "sbx-test-dummy-key\n", 19, 0600);
    const char *saved = getenv("RAY_AUTH_TOKEN");
    char *keep = saved ? strdup(saved) : NULL;
    unsetenv("RAY_AUTH_TOKEN");
    setenv("RAY_AUTH_TOKEN_PATH", path, 1);
    setenv("HOME", dir, 1);
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new("ray", &err);
    cr_assert_not_null(c);
    tu_fake_reset();
    sbx_sandbox *sb = tu_create(c, NULL);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    json_object *log = tu_fake_log();
    size_t n = json_object_array_length(log);
    cr_assert(n > 0);
    for (size_t i = 0; i < n; i++)
        cr_assert_str_eq(tu_json_str(json_object_array_get_idx(log, i), "auth"),
                         "Bearer <redacted>");
    json_object_put(log);

    /* A token file named and not there is a configuration error naming
     * it. */
    char *missing = tu_strdup_printf("%s/no-such-token", dir);
    setenv("RAY_AUTH_TOKEN_PATH", missing, 1);
    cr_assert_null(sbx_client_new("ray", &err));
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, missing, "(RAY_AUTH_TOKEN_PATH)",
                    "No such file or directory", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), missing);
    sbx_error_free(err);
    err = NULL;
    free(missing);

    unsetenv("RAY_AUTH_TOKEN_PATH");
    c = sbx_client_new("ray", &err);
    cr_assert_not_null(c);
    cr_assert_null(sbx_sandbox_create(c, NULL, &err));
    tu_assert_error(err, SBX_ERROR_AUTHENTICATION, "Unauthorized: missing authentication token",
                    NULL);
    sbx_error_free(err);
    sbx_client_free(c);
    if (keep)
        setenv("RAY_AUTH_TOKEN", keep, 1);
    free(keep);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* Ray answers errors as text/plain: the text is the error's message. */
Test(ray, a_plain_text_error_is_reported_with_its_text)
{
    tu_fake_post("/_fake/faults", "{\"method\": \"POST\", \"path\": \"^/api/jobs/$\", "
                 "\"status\": 400, \"message\": \"entrypoint_num_cpus must be a number, got "
                 "str\"}");
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, NULL, &err));
    tu_assert_error(err, SBX_ERROR_CONFIGURATION,
                    "entrypoint_num_cpus must be a number, got str (HTTP 400)", NULL);
    cr_assert_str_eq(sbx_error_get0_backend(err), "ray");
    sbx_error_free(err);
}

/* The probe asks the dashboard its version: available when it answers;
 * unavailable, saying why, when it answers an error or nothing listens. */
Test(ray, the_probe_reaches_the_dashboard)
{
    uint64_t caps = 0;
    sbx_error *err = NULL;
    cr_assert_eq(sbx_client_probe(g_client, &caps, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_neq(caps, 0);
    tu_fake_post("/_fake/faults", "{\"method\": \"GET\", \"path\": \"^/api/version$\", "
                 "\"status\": 503, \"message\": \"dashboard starting\"}");
    caps = 7;
    cr_assert_eq(sbx_client_probe(g_client, &caps, &err), -1);
    tu_assert_error(err, SBX_ERROR_CONNECTION, "dashboard starting (HTTP 503)", NULL);
    cr_assert_str_eq(sbx_error_get0_op(err), "probe");
    sbx_error_free(err);
    err = NULL;
    char *cfg = tu_strdup_printf("{\"address\":\"http://127.0.0.1:%u\"}", tu_free_port());
    sbx_client *c = sbx_client_new_with_config("ray", SBX_PLUGIN_MODE_DEFAULT, cfg, &err);
    cr_assert_not_null(c);
    cr_assert_eq(sbx_client_probe(c, &caps, &err), -1);
    tu_assert_error(err, SBX_ERROR_CONNECTION, "reach the Ray dashboard on 127.0.0.1:", NULL);
    sbx_error_free(err);
    sbx_client_free(c);
    free(cfg);
}

/* memory_mb is sent as entrypoint_memory in bytes (Ray's reservation) and
 * enforced by the driver: a command past it is killed, exit 137 with the
 * OOM flag; the backend option entrypoint_memory_mb alone reserves
 * without a limit, and beside memory_mb is refused naming both. */
Test(ray, memory_mb_is_reserved_and_enforced)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_memory_mb(o, 64, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    tu_fake_reset();
    sbx_result *r = tu_sh(g_sb, "echo small", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "small\n");
    cr_assert_eq(sbx_result_is_oom_killed(r), 0);
    sbx_result_free(r);
    json_object *subs = submissions(), *v = NULL;
    cr_assert(json_object_object_get_ex(json_object_array_get_idx(subs, 0), "entrypoint_memory",
                                        &v));
    cr_assert_eq(json_object_get_int64(v), 64LL * 1024 * 1024);
    json_object_put(subs);

    /* 256 MiB held in a child of the shell: the whole tree is killed. */
    r = tu_sh(g_sb, "python3 -c 'import time; b=bytearray(256*1024*1024); time.sleep(20)'; "
              "echo after", 30);
    tu_assert_exit(r, 137);
    tu_assert_stdout(r, "");
    cr_assert_eq(sbx_result_is_timed_out(r), 0);
    cr_assert_eq(sbx_result_is_oom_killed(r), 1);
    sbx_result_free(r);
    /* The sandbox lives on; a kill -9 is 137 without the flag. */
    r = tu_sh(g_sb, "kill -9 $$", 30);
    tu_assert_exit(r, 137);
    cr_assert_eq(sbx_result_is_oom_killed(r), 0);
    sbx_result_free(r);

    /* The limit is in the session state, and a resumed sandbox keeps it. */
    sbx_error *err = NULL;
    char *state = sbx_sandbox_session_state(g_sb, &err);
    cr_assert_not_null(state, "session_state: %s", err ? sbx_error_get0_message(err) : "");
    json_object *sj = json_tokener_parse(state), *data = NULL, *lim = NULL;
    cr_assert(json_object_object_get_ex(sj, "data", &data), "%s", state);
    cr_assert(json_object_object_get_ex(data, "memory_limit", &lim), "%s", state);
    cr_assert_eq(json_object_get_int64(lim), 64LL * 1024 * 1024);
    json_object_put(sj);
    sbx_sandbox *sb2 = sbx_sandbox_resume(g_client, state, &err);
    free(state);
    cr_assert_not_null(sb2, "resume: %s", err ? sbx_error_get0_message(err) : "");
    r = tu_sh(sb2, "python3 -c 'import time; b=bytearray(256*1024*1024); time.sleep(20)'", 30);
    tu_assert_exit(r, 137);
    cr_assert_eq(sbx_result_is_oom_killed(r), 1);
    sbx_result_free(r);
    sbx_sandbox_free(sb2);
    sb2 = NULL;

    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_memory_mb(o, 512, NULL), 0);
    cr_assert_eq(sbx_options_set_backend_options(o, "{\"entrypoint_memory_mb\": 256}", NULL), 0);
    cr_assert_null(sb2 = sbx_sandbox_create(g_client, o, &err));
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "entrypoint_memory_mb 256 beside memory_mb 512",
                    NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "name"), "entrypoint_memory_mb");
    sbx_error_free(err);
    sbx_options_free(o);
}

/* The backend option entrypoint_memory_mb alone becomes entrypoint_memory
 * in bytes: a reservation, no limit (a command past it runs on). */
Test(ray, entrypoint_memory_mb_reserves_without_a_limit)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_backend_options(o, "{\"entrypoint_memory_mb\": 64}", NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    tu_fake_reset();
    sbx_result *r = tu_sh(g_sb, "python3 -c 'import time; b=bytearray(128*1024*1024); "
                          "time.sleep(0.3)'; echo after", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "after\n");
    cr_assert_eq(sbx_result_is_oom_killed(r), 0);
    sbx_result_free(r);
    json_object *subs = submissions(), *v = NULL;
    cr_assert(json_object_object_get_ex(json_object_array_get_idx(subs, 0), "entrypoint_memory",
                                        &v));
    cr_assert_eq(json_object_get_int64(v), 64LL * 1024 * 1024);
    json_object_put(subs);
}

/* A command longer than an entrypoint can hold (Ray hands the entrypoint
 * to "sh -c", one argument of at most 128 KiB) travels in the job's
 * working_dir package and runs the same. */
Test(ray, a_long_command_travels_in_the_package)
{
    g_sb = tu_create(g_client, NULL);
    size_t n = 100 * 1024;
    char *big = malloc(n + 1);
    cr_assert_not_null(big);
    memset(big, 'x', n);
    big[n] = '\0';
    const char *argv[] = { "sh", "-c", "printf %s \"$1\" | wc -c", "sh", big, NULL };
    tu_fake_reset();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = argv;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "102400\n");
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "PUT", "/api/packages/gcs/_ray_pkg_[0-9a-f]{32}\\.zip", NULL,
                               0), 1);
    json_object_put(log);
    free(big);
}

/* The job that made a sandbox is its label (list_owned, destroy_by_id,
 * `sbx gc`): its record, kept until destroy, carries the ownership
 * metadata and no env value (the create's env reached the sandbox by a job
 * whose record went at once). */
Test(ray, the_label_job_holds_no_env_value)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_env(o, "SECRET", "s3cr3t-value", NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    sbx_result *r = tu_sh(g_sb, "echo \"$SECRET\"", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "s3cr3t-value\n");
    sbx_result_free(r);
    char *path = tu_strdup_printf("/api/jobs/%s", sbx_sandbox_get0_id(g_sb)), *body = NULL;
    const char *auth = "Authorization: Bearer sbx-test-dummy-key";
    cr_assert_eq(tu_fake_http("GET", path, auth, NULL, &body), 200);
    cr_assert_null(strstr(body, "s3cr3t-value"), "the label holds the env value: %s", body);
    json_object *j = json_tokener_parse(body), *meta = NULL;
    cr_assert(json_object_object_get_ex(j, "metadata", &meta));
    cr_assert_str_eq(tu_json_str(meta, "sbx_backend"), "ray");
    cr_assert_str_eq(tu_json_str(meta, "sbx_kind"), "sandbox");
    cr_assert_str_eq(tu_json_str(meta, "sbx_dir"), sbx_sandbox_get0_root(g_sb));
    cr_assert_str_eq(tu_json_str(meta, "sbx_made"), "1");
    cr_assert_eq(strlen(tu_json_str(meta, "sbx_create_token")), 36);
    cr_assert_str_eq(tu_json_str(j, "status"), "SUCCEEDED");
    json_object_put(j);
    free(body);
    body = NULL;
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    cr_assert_eq(tu_fake_http("GET", path, auth, NULL, &body), 404);
    char *want = tu_strdup_printf("Job %s does not exist", sbx_sandbox_get0_id(g_sb));
    cr_assert_str_eq(body, want);
    free(want);
    free(body);
    free(path);
}

/* A submit whose answer was lost is sent again with the same
 * submission_id; the cluster refuses it (400, the id is in use), which
 * says the job is there: the command runs once and its output comes. */
Test(ray, a_lost_submit_answer_runs_the_command_once)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    tu_fake_post("/_fake/config", "{\"lose_submit_answers\": 1}");
    sbx_result *r = tu_sh(g_sb, "echo once >> \"$SANDBOX_ROOT/count\"; cat \"$SANDBOX_ROOT/count\"",
                          30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "once\n");
    sbx_result_free(r);
    json_object *subs = submissions();
    cr_assert_eq(json_object_array_length(subs), 2);
    cr_assert_str_eq(tu_json_str(json_object_array_get_idx(subs, 0), "submission_id"),
                     tu_json_str(json_object_array_get_idx(subs, 1), "submission_id"));
    json_object_put(subs);
    json_object *log = tu_fake_log();
    int n400 = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *st = NULL;
        if (strcmp(tu_json_str(e, "path"), "/api/jobs/") == 0
            && json_object_object_get_ex(e, "status", &st) && json_object_get_int(st) == 400)
            n400++;
    }
    cr_assert_eq(n400, 1, "the re-sent submit was answered 400 %d times", n400);
    json_object_put(log);
}

/* The sandbox's resources go with the caller's commands only: with every
 * CPU of the node (4) held by a command, a timeout's kill jobs (and the
 * plugin's other jobs) carry none and run at once; the command ends 124. */
Test(ray, the_plugins_own_jobs_take_no_resources)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 4.0, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    tu_fake_reset();
    sbx_result *r = tu_sh(g_sb, "sleep 30", 1);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    sbx_result_free(r);
    json_object *subs = submissions();
    size_t n = json_object_array_length(subs);
    /* The command, then the TERM's kill job (and the KILL's, when the
     * command outlived the grace). */
    cr_assert(n >= 2, "%zu submissions: the command and its kill", n);
    for (size_t i = 0; i < n; i++) {
        json_object *b = json_object_array_get_idx(subs, i), *v = NULL;
        int has = json_object_object_get_ex(b, "entrypoint_num_cpus", &v);
        cr_assert_eq(has, i == 0, "submission %zu %s entrypoint_num_cpus", i,
                     has ? "carries" : "lacks");
        if (has)
            cr_assert(json_object_get_double(v) == 4.0);
    }
    json_object_put(subs);
}

/* The job tu_wait_count() asks about (job_there). */
static char g_job[64];

/* 1 while the fake has job g_job, else 0. */
static size_t job_there(void)
{
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", "/_fake/jobs", NULL, NULL, &body), 200);
    json_object *jobs = json_tokener_parse(body);
    size_t there = json_object_object_get(jobs, g_job) != NULL;
    json_object_put(jobs);
    free(body);
    return there;
}

/* The id of a command's job (not a sandbox's label, sbx-ray-*) once the
 * fake runs it (a new string), asked every 25 ms for 10 s. */
static char *running_command_job(void)
{
    char *sid = NULL;
    for (int i = 0; i < 400 && !sid; i++) {
        char *body = NULL;
        cr_assert_eq(tu_fake_http("GET", "/_fake/jobs", NULL, NULL, &body), 200);
        json_object *jobs = json_tokener_parse(body);
        json_object_object_foreach(jobs, k, v) {
            const char *st = tu_json_str(v, "status");
            if (!sid && st && strcmp(st, "RUNNING") == 0 && strncmp(k, "sbx-ray-", 8) != 0)
                sid = strdup(k);
        }
        json_object_put(jobs);
        free(body);
        if (!sid)
            usleep(25000);
    }
    cr_assert_not_null(sid, "the command's job never ran");
    return sid;
}

/* A process freed while its command runs: the command's job is stopped
 * and its record deleted; nothing of it runs on. */
Test(ray, a_freed_process_leaves_no_job, .timeout = 120)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo started; sleep 30";
    sbx_error *err = NULL;
    sbx_process *p = sbx_sandbox_start_process(g_sb, &req, &err);
    cr_assert_not_null(p, "start_process: %s", err ? sbx_error_get0_message(err) : "");
    char *sid = running_command_job();
    sbx_process_free(p);
    /* Out of process the free completes in the plugin host after the call
     * returned: wait for the record to go, up to the plugin's own bounds
     * (the kill, a job of its own, 30 s; then the stop and the delete,
     * RAY_REAP_S, 30 s) and 15 s more: a loaded cluster stops jobs slowly. */
    snprintf(g_job, sizeof g_job, "%s", sid);
    cr_assert_eq(tu_wait_count(job_there, 0, 75.0), 0, "job %s is still on the cluster", sid);
    sbx_result *r = tu_sh(g_sb, "ps -eo args | grep -c '^sleep 30$'", 30);
    tu_assert_stdout(r, "0\n");
    sbx_result_free(r);
    free(sid);
}

/* The exec jobs on the fake (not a sandbox's label, sbx-ray-*): how many,
 * the first one's id in @sid (sized 64) when @sid is not NULL. */
static int exec_jobs(char *sid)
{
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", "/_fake/jobs", NULL, NULL, &body), 200);
    json_object *jobs = json_tokener_parse(body);
    int n = 0;
    json_object_object_foreach(jobs, k, v) {
        (void)v;
        if (strncmp(k, "sbx-ray-", 8) == 0)
            continue;
        if (n++ == 0 && sid)
            snprintf(sid, 64, "%s", k);
    }
    json_object_put(jobs);
    free(body);
    return n;
}

/* exec_jobs(NULL), for tu_wait_count(). */
static size_t exec_job_count(void)
{
    return (size_t)exec_jobs(NULL);
}

/* A command's record the worker could not delete (the cluster refused the
 * DELETE) is not left behind: the process's free stops the job (ended
 * already: Ray answers "stopped": false) and deletes its record. */
Test(ray, a_record_whose_delete_failed_goes_with_the_free, .timeout = 120)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    cr_assert_eq(exec_jobs(NULL), 0);
    tu_fake_post("/_fake/faults", "{\"method\": \"DELETE\", \"path\": \"^/api/jobs/sbx-\", "
                 "\"status\": 400, \"message\": \"cluster busy\", \"times\": 1}");
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo hi";
    sbx_error *err = NULL;
    sbx_process *p = sbx_sandbox_start_process(g_sb, &req, &err);
    cr_assert_not_null(p, "start_process: %s", err ? sbx_error_get0_message(err) : "");
    int code = -1;
    cr_assert_eq(sbx_process_wait(p, -1, &code, NULL, &err), 1, "wait: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(code, 0);
    char sid[64] = "";
    cr_assert_eq(exec_jobs(sid), 1, "the refused DELETE left the record");
    sbx_process_free(p);
    /* Out of process the free completes in the plugin host. */
    cr_assert_eq(tu_wait_count(exec_job_count, 0, 10.0), 0, "job %s is still on the cluster",
                 sid);
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("^/api/jobs/%s$", sid);
    cr_assert_eq(tu_fake_count(log, "DELETE", re, NULL, 0), 2);
    free(re);
    re = tu_strdup_printf("^/api/jobs/%s/stop$", sid);
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 1);
    free(re);
    json_object_put(log);
}

/* Stops every command job on the fake and deletes its record, through the
 * Jobs API (what a test left behind on purpose). */
static void drop_exec_jobs(void)
{
    const char *auth = "Authorization: Bearer sbx-test-dummy-key";
    char sid[64];
    for (int i = 0; i < 400 && exec_jobs(sid) > 0; i++) {
        char *stop = tu_strdup_printf("/api/jobs/%s/stop", sid);
        char *item = tu_strdup_printf("/api/jobs/%s", sid);
        tu_fake_http("POST", stop, auth, NULL, NULL);
        if (tu_fake_http("DELETE", item, auth, NULL, NULL) != 200)
            usleep(25000);
        free(stop);
        free(item);
    }
    cr_assert_eq(exec_jobs(NULL), 0, "a command job stays on the fake");
}

/* A process freed while its command runs, with a call timeout of 1 s, on
 * a cluster that drops every request: the free (the kill, the stop and the
 * delete of its job) gives up within the call timeout and the lost look's
 * CL_LOST_LOOK_S (0.5 s), not its own 30 s bounds (in process the free took
 * 34.3 s). Out of process the free returns at once and its work in the
 * plugin host keeps the same bound: the job, which it could not reap, is
 * still on the cluster once the cluster answers again (3 s after the
 * free), its record naming its sandbox. */
Test(ray, a_free_on_a_cluster_not_answering_keeps_the_call_timeout, .timeout = 120)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    sbx_error *err = NULL;
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 1, &err), 0);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo started; sleep 30";
    sbx_process *p = sbx_sandbox_start_process(g_sb, &req, &err);
    cr_assert_not_null(p, "start_process: %s", err ? sbx_error_get0_message(err) : "");
    char *sid = running_command_job();
    tu_fake_post("/_fake/faults", "[{\"path\": \"^/api/\", \"action\": \"drop\", "
                 "\"times\": -1}]");
    double t0 = tu_now();
    sbx_process_free(p);
    double took = tu_now() - t0;
    usleep(3000 * 1000);
    tu_fake_post("/_fake/faults", "[]");
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 0, NULL), 0);
    fprintf(stderr, "ray: the free on a cluster not answering took %.2f s (%s)\n", took,
            getenv("SBX_PLUGIN_MODE") ? getenv("SBX_PLUGIN_MODE") : "default mode");
    cr_assert_lt(took, 2.5, "the free took %.2f s (call timeout 1 s)", took);
    char *path = tu_strdup_printf("/api/jobs/%s", sid), *body = NULL;
    cr_assert_eq(tu_fake_http("GET", path, "Authorization: Bearer sbx-test-dummy-key", NULL,
                              &body), 200, "job %s is gone: %s", sid, body ? body : "");
    json_object *j = json_tokener_parse(body), *meta = NULL;
    cr_assert(json_object_object_get_ex(j, "metadata", &meta), "%s", body);
    cr_assert_str_eq(tu_json_str(meta, "sbx_backend"), "ray");
    cr_assert_str_eq(tu_json_str(meta, "sbx_sandbox"), sbx_sandbox_get0_id(g_sb));
    json_object_put(j);
    free(body);
    free(path);
    free(sid);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    drop_exec_jobs();
}

/* The submit of the command's job, in the fake's log: 1 once it came, 2
 * once it was answered (the job made). */
static size_t submit_state(void)
{
    json_object *log = tu_fake_log();
    size_t state = 0;
    for (size_t i = 0; i < json_object_array_length(log) && !state; i++) {
        json_object *e = json_object_array_get_idx(log, i), *st = NULL;
        if (strcmp(tu_json_str(e, "method"), "POST") == 0
            && strcmp(tu_json_str(e, "path"), "/api/jobs/") == 0)
            state = json_object_object_get_ex(e, "status", &st) && json_object_get_int(st) != 0
                    ? 2 : 1;
    }
    json_object_put(log);
    return state;
}

/* A process freed while the submit of its command's job is in flight (the
 * cluster takes 3 s to handle it: a "pass" fault) makes no job record
 * that stays: the free cancels the wait for the answer and finds no job
 * yet, and the job the cluster makes after it, found by its submission id
 * (the plugin's own), is stopped and its record deleted, once. */
Test(ray, a_process_freed_while_its_submit_is_in_flight_leaves_no_job, .timeout = 120)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    tu_fake_post("/_fake/faults", "{\"method\": \"POST\", \"path\": \"^/api/jobs/$\", "
                 "\"action\": \"pass\", \"delay\": 3, \"times\": 1}");
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo started; sleep 30";
    sbx_error *err = NULL;
    sbx_process *p = sbx_sandbox_start_process(g_sb, &req, &err);
    cr_assert_not_null(p, "start_process: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(tu_wait_count(submit_state, 1, 10.0), 1, "the submit never came");
    sbx_process_free(p);
    /* The cluster makes the job (its late answer goes nowhere). */
    cr_assert_eq(tu_wait_count(submit_state, 2, 10.0), 2, "the submit was never answered");
    json_object *subs = submissions();
    char *sid = strdup(tu_json_str(json_object_array_get_idx(subs, 0), "submission_id"));
    json_object_put(subs);
    snprintf(g_job, sizeof g_job, "%s", sid);
    size_t left = tu_wait_count(job_there, 0, 15.0);
    if (left)
        drop_exec_jobs();
    cr_assert_eq(left, 0, "the command's job %s is left on the cluster", sid);
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("^/api/jobs/%s$", sid);
    cr_assert_eq(tu_fake_count(log, "DELETE", re, NULL, 0), 1);
    free(re);
    json_object_put(log);
    sbx_result *r = tu_sh(g_sb, "ps -eo args | grep -c '^sleep 30$'", 30);
    tu_assert_stdout(r, "0\n");
    sbx_result_free(r);
    free(sid);
}

/* A process whose stdin stays open (SBX_EXEC_STDIN_OPEN, never closed),
 * freed before its command was submitted (ray reads stdin whole for the
 * job's package): no command job is left on the cluster. That the free is
 * not waited for is the conformance suite's
 * exec::a_process_freed_with_its_stdin_open_is_not_waited_for. */
Test(ray, a_process_freed_with_its_stdin_open_leaves_no_job, .timeout = 60)
{
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "cat; sleep 30";
    req.flags = SBX_EXEC_STDIN_OPEN;
    sbx_error *err = NULL;
    sbx_process *p = sbx_sandbox_start_process(g_sb, &req, &err);
    cr_assert_not_null(p, "start_process: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_process_write_stdin(p, "abc", 3, &err), 0, "write_stdin: %s",
                 err ? sbx_error_get0_message(err) : "");
    usleep(300 * 1000);
    sbx_process_free(p);
    /* Out of process the free completes in the plugin host. */
    cr_assert_eq(tu_wait_count(exec_job_count, 0, 10.0), 0,
                 "a command job is left on the cluster");
}

/* ------------------------------------------------------------ log tail */

/* The command prints a line, then waits (up to 10 s) for a file that only
 * the output callback makes, on seeing that line: "second" shows the line
 * came through the job log's tail while the command ran. The log is
 * followed through its tail WebSocket (one per job), never polled. */
Test(ray, output_comes_through_the_log_tail_while_the_command_runs)
{
    g_sb = tu_create(g_client, NULL);
    char *root = node_root();
    char *go = tu_strdup_printf("%s/tmp/sbx-ray-go", root);
    tu_fake_reset();
    tu_assert_output_is_live(g_sb, go, "/tmp/sbx-ray-go");
    free(go);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "GET", "/api/jobs/[^/]+/logs/tail", NULL, 0), 1);
    cr_assert_eq(tu_fake_count(log, "GET", "/api/jobs/[^/]+/logs", NULL, 0), 0,
                 "the log was polled");
    json_object_put(log);
    free(root);
}
