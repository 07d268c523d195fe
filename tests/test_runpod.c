/*
 * test_runpod.c — what only the runpod backend does, through its contract
 * fake (tests/fakes/runpod.py, whose pods are OpenSSH servers on
 * 127.0.0.1), run by tests/runpod.sh (tests/hosted.sh) in both plugin
 * modes, one test at a time (they script the one fake):
 *
 *  - the create body: GPU, image, ports (22/tcp), disk, env with the
 *    public key and the ownership labels, RunPod's own backend options
 *    merged and the transport options never sent;
 *  - refusals naming the option (no GPU, allow_internet=false,
 *    snapshot_id) with nothing created;
 *  - capacity fallback through gpuTypeIds; 429 with Retry-After on create;
 *  - readiness that never comes: the pod is deleted, the error names it;
 *  - the pod's hourly price in the session state, and as the price of its
 *    usage (create, resume, the ledger);
 *  - no lifetime at RunPod: sbx gc reaps a pod past its recorded expiry;
 *  - CASE-31: a command's 255 against ssh's (connection refused, changed
 *    host key), host keys per sandbox, the user's known_hosts untouched;
 *  - CASE-29: an 80-byte TMPDIR/HOME/XDG_RUNTIME_DIR, a 32-byte user and a
 *    60-byte host alias (resolved to 127.0.0.1 through an /etc/hosts of the
 *    test's own mount namespace), control sockets of at most 90 bytes;
 *  - the control master: one per sandbox, replaced when it dies or is
 *    stopped (before a command, or while one runs), closed at destroy;
 *  - CASE-52 A (slow): a quiet command behind an idle reaper.
 */
#include "testutil.h"

#include <criterion/criterion.h>

#include <json-c/json.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sbx/sbx.h>

static sbx_client *g_client;
static sbx_sandbox *g_sb;

static void fake_config_reset(void)
{
    tu_fake_post("/_fake/config", "{\"ready_delay\": 0, \"unavailable\": [], \"no_port\": false, "
                 "\"login_user\": null, \"public_host\": null}");
}

static void setup(void)
{
    sbx_error *err = NULL;
    cr_assert_str_eq(tu_backend(), "runpod", "run by tests/runpod.sh");
    tu_fake_use("RUNPOD_API_BASE_URL");
    tu_fake_reset();
    fake_config_reset();
    g_client = sbx_client_new("runpod", &err);
    cr_assert_not_null(g_client, "sbx_client_new: %s", err ? sbx_error_get0_message(err) : "");
    g_sb = NULL;
}

static pid_t master_pid(int port);
static int wait_state(pid_t pid, char want);

/* A test's own temporary directory, removed (with everything in it) once
 * its sandbox and client are gone; NULL when none. */
static char *g_tmp_base;

static void teardown(void)
{
    fake_config_reset();
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    sbx_client_free(g_client);
    g_client = NULL;
    tu_reaper_stop();
    if (g_tmp_base) {
        tu_rmtree(g_tmp_base);
        free(g_tmp_base);
        g_tmp_base = NULL;
    }
}

TestSuite(runpod, .init = setup, .fini = teardown, .timeout = 120);

/* The fake's view of pod @id (GET /_fake/pods/ID), parsed. */
static json_object *fake_pod(const char *id)
{
    char *path = tu_strdup_printf("/_fake/pods/%s", id), *body = NULL;
    cr_assert_eq(tu_fake_http("GET", path, NULL, NULL, &body), 200, "no pod %s in the fake", id);
    json_object *j = json_tokener_parse(body);
    cr_assert_not_null(j);
    free(path);
    free(body);
    return j;
}

/* The number of pods the fake lists (GET /v2/pods). */
static int fake_pod_count(void)
{
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", "/v2/pods", "Authorization: Bearer sbx-test-dummy-key",
                              NULL, &body), 200);
    json_object *j = json_tokener_parse(body), *pods = NULL;
    cr_assert(json_object_object_get_ex(j, "pods", &pods));
    int n = (int)json_object_array_length(pods);
    json_object_put(j);
    free(body);
    return n;
}

static sbx_sandbox *create_with(const char *backend_options)
{
    sbx_options *o = sbx_options_new();
    if (backend_options)
        cr_assert_eq(sbx_options_set_backend_options(o, backend_options, NULL), 0);
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    return sb;
}

/* The ssh processes of this host whose command line holds @needle (with
 * the pod's port): how many. */
static int ssh_procs(const char *needle, int port)
{
    char want_port[32];
    snprintf(want_port, sizeof want_port, "%d", port);
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        char path[300], buf[8192];
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        if (len == 0 || strcmp(buf, "ssh") != 0)
            continue;
        int has_needle = 0, has_port = 0, prev_p = 0;
        for (size_t i = 0; i < len; i += strlen(buf + i) + 1) {
            if (strstr(buf + i, needle))
                has_needle = 1;
            if (prev_p && strcmp(buf + i, want_port) == 0)
                has_port = 1;
            prev_p = strcmp(buf + i, "-p") == 0;
        }
        n += has_needle && has_port;
    }
    closedir(d);
    return n;
}

/* The pod's public port for 22 as the fake reports it. */
static int pod_port(sbx_sandbox *sb)
{
    json_object *j = fake_pod(sbx_sandbox_get0_id(sb)), *p = NULL;
    cr_assert(json_object_object_get_ex(j, "port", &p));
    int port = json_object_get_int(p);
    json_object_put(j);
    return port;
}

/* ------------------------------------------------------------ create body */

Test(runpod, create_body_follows_the_contract)
{
    g_sb = create_with("{\"cloud\": \"SECURE\", \"gpuTypePriority\": \"custom\", "
                       "\"ssh_user\": \"root\", \"poll_interval_secs\": 0.1, "
                       "\"api_timeout_secs\": 20, \"ssh_connect_timeout_secs\": 5}");
    json_object *pod = fake_pod(sbx_sandbox_get0_id(g_sb)), *body = NULL, *v = NULL;
    cr_assert(json_object_object_get_ex(pod, "body", &body));
    cr_assert_str_eq(tu_json_str(body, "image"), "runpod/base:0.6.2-cuda12.2.0");
    cr_assert_str_eq(tu_json_str(body, "cloud"), "SECURE");
    cr_assert_str_eq(tu_json_str(body, "gpuTypePriority"), "custom");
    cr_assert(json_object_object_get_ex(body, "gpu", &v));
    cr_assert_str_eq(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN),
                     "{\"id\":\"NVIDIA GeForce RTX 4090\",\"count\":1}");
    cr_assert(json_object_object_get_ex(body, "ports", &v));
    cr_assert_str_eq(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN), "[\"22\\/tcp\"]");
    static const char *const never[] = { "ssh_user", "poll_interval_secs", "api_timeout_secs",
                                         "ssh_connect_timeout_secs", "disk", NULL };
    for (int i = 0; never[i]; i++)
        cr_assert(!json_object_object_get_ex(body, never[i], NULL), "%s was sent", never[i]);
    json_object *env = NULL;
    cr_assert(json_object_object_get_ex(body, "env", &env));
    cr_assert_str_eq(tu_json_str(env, "SBX_BACKEND"), "runpod");
    const char *tok = tu_json_str(env, "SBX_CREATE_TOKEN");
    cr_assert(tok && strncmp(tok, "sbx-", 4) == 0 && strlen(tok) == 36, "token %s", tok);
    const char *exp = tu_json_str(env, "SBX_EXPIRES_AT");
    cr_assert(exp && strtod(exp, NULL) > (double)time(NULL), "expiry %s", exp);
    /* The public half of the key the suites use. */
    char *pubpath = tu_strdup_printf("%s.pub", getenv("SBX_RUNPOD_SSH_KEY"));
    FILE *f = fopen(pubpath, "r");
    cr_assert_not_null(f);
    char pub[4096] = "";
    cr_assert_not_null(fgets(pub, sizeof pub, f));
    fclose(f);
    pub[strcspn(pub, "\n")] = '\0';
    cr_assert_str_eq(tu_json_str(env, "PUBLIC_KEY"), pub);
    free(pubpath);
    json_object_put(pod);
}

Test(runpod, disk_and_env_and_image)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_disk_mb(o, 20 * 1024 + 1, NULL), 0);
    cr_assert_eq(sbx_options_set_image(o, "runpod/pytorch:2.4.0", NULL), 0);
    cr_assert_eq(sbx_options_set_env(o, "GREETING", "hello 'there' $x", NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    json_object *pod = fake_pod(sbx_sandbox_get0_id(g_sb)), *body = NULL, *v = NULL;
    cr_assert(json_object_object_get_ex(pod, "body", &body));
    cr_assert(json_object_object_get_ex(body, "disk", &v));
    cr_assert_eq(json_object_get_int(v), 21);
    cr_assert_str_eq(tu_json_str(body, "image"), "runpod/pytorch:2.4.0");
    json_object *env = NULL;
    cr_assert(json_object_object_get_ex(body, "env", &env));
    cr_assert_str_eq(tu_json_str(env, "GREETING"), "hello 'there' $x");
    json_object_put(pod);
    /* The create's env reaches commands over ssh. */
    sbx_result *r = tu_sh(g_sb, "printf '%s' \"$GREETING\"", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "hello 'there' $x");
    sbx_result_free(r);
}

/* An ssh master that ends saying nothing (no line in its log, as when it
 * is killed before it could speak) is started once more: here the first
 * `ssh -N` on PATH exits 255 silently, the second is the real one. The
 * create and a command succeed, and the silent one ran exactly once. */
Test(runpod, a_master_that_ends_saying_nothing_is_started_again)
{
    char dir[] = "/tmp/sbx-test-rp-ssh-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    g_tmp_base = strdup(dir);   /* removed by the teardown, whatever happens */
    char *wrapper = tu_strdup_printf("%s/ssh", dir), *count = tu_strdup_printf("%s/silent", dir);
    char *script = tu_strdup_printf(
        "#!/bin/sh\n"
        "for a; do if [ \"$a\" = -N ] && [ ! -e '%s' ]; then echo x > '%s'; exit 255; fi; done\n"
        "PATH=${PATH#*:} exec ssh \"$@\"\n", count, count);
    tu_write_file(wrapper, script, strlen(script), 0755);
    const char *old = getenv("PATH");
    char *saved = strdup(old ? old : "/usr/bin:/bin");
    char *path = tu_strdup_printf("%s:%s", dir, saved);
    setenv("PATH", path, 1);
    sbx_error *err = NULL;
    /* PATH holds the wrapper while the plugin starts ssh: in process at
     * the create, out of process from the plugin host's start. */
    sbx_client *c = sbx_client_new("runpod", &err);
    cr_assert_not_null(c, "sbx_client_new: %s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *sb = tu_create(c, NULL);
    sbx_result *r = tu_sh(sb, "echo hi", 20);
    setenv("PATH", saved, 1);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "hi\n");
    sbx_result_free(r);
    cr_assert(tu_exists(count), "the silent ssh never ran");
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    free(wrapper);
    free(count);
    free(script);
    free(path);
    free(saved);
}

/* ------------------------------------------------------------ refusals */

static void assert_refused(sbx_options *o, const char *option)
{
    sbx_error *err = NULL;
    int before = fake_pod_count();
    cr_assert_null(sbx_sandbox_create(g_client, o, &err), "%s accepted", option);
    cr_assert_not_null(err);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION, "%s: %s", option,
                 sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), option);
    cr_assert(strstr(sbx_error_get0_message(err), option) != NULL, "message %s",
              sbx_error_get0_message(err));
    sbx_error_free(err);
    cr_assert_eq(fake_pod_count(), before, "a refused create made a pod");
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/v2/pods", NULL, 0), 0);
    json_object_put(log);
}

Test(runpod, refusals_name_the_option)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    assert_refused(o, "allow_internet");
    sbx_options_free(o);
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_snapshot_id(o, "snap-1", NULL), 0);
    assert_refused(o, "snapshot_id");
    sbx_options_free(o);
    /* No GPU anywhere: a client without the default. */
    sbx_client_free(g_client);
    char *saved = strdup(getenv("SBX_RUNPOD_GPU"));
    unsetenv("SBX_RUNPOD_GPU");
    sbx_error *err = NULL;
    g_client = sbx_client_new("runpod", &err);
    setenv("SBX_RUNPOD_GPU", saved, 1);
    free(saved);
    cr_assert_not_null(g_client);
    o = sbx_options_new();
    assert_refused(o, "gpu");
    sbx_options_free(o);
}

/* ------------------------------------------------------------ capacity, 429 */

Test(runpod, gpu_type_ids_fall_back_on_capacity)
{
    tu_fake_post("/_fake/config", "{\"unavailable\": [\"NVIDIA GeForce RTX 4090\"]}");
    g_sb = create_with("{\"gpuTypeIds\": [\"NVIDIA GeForce RTX 4090\", \"NVIDIA A40\"]}");
    json_object *pod = fake_pod(sbx_sandbox_get0_id(g_sb));
    json_object_put(pod);
    char *body = NULL;
    char *path = tu_strdup_printf("/v2/pods/%s", sbx_sandbox_get0_id(g_sb));
    cr_assert_eq(tu_fake_http("GET", path, "Authorization: Bearer sbx-test-dummy-key", NULL,
                              &body), 200);
    json_object *j = json_tokener_parse(body), *gpu = NULL;
    cr_assert(json_object_object_get_ex(j, "gpu", &gpu));
    cr_assert_str_eq(tu_json_str(gpu, "id"), "NVIDIA A40");
    json_object_put(j);
    free(body);
    free(path);
}

Test(runpod, no_capacity_is_a_configuration_error)
{
    tu_fake_post("/_fake/config", "{\"unavailable\": [\"NVIDIA GeForce RTX 4090\"]}");
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, NULL, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "create the pod: There are no longer any instances available with the "
                     "requested specifications (NVIDIA GeForce RTX 4090) (HTTP 409)");
    sbx_error_free(err);
    cr_assert_eq(fake_pod_count(), 0);
}

Test(runpod, create_429_with_retry_after_is_retried)
{
    tu_fake_post("/_fake/faults", "{\"method\": \"POST\", \"path\": \"^/v2/pods$\", "
                 "\"status\": 429, \"retry_after\": \"1\", \"times\": 1}");
    double t0 = tu_now();
    g_sb = create_with(NULL);
    double dt = tu_now() - t0;
    json_object *log = tu_fake_log();
    double t[2];
    cr_assert_eq(tu_fake_count(log, "POST", "/v2/pods", t, 2), 2);
    cr_assert(t[1] - t[0] >= 1.0, "the retry came %.2f s after the 429", t[1] - t[0]);
    json_object_put(log);
    cr_assert(dt >= 1.0);
}

/* ------------------------------------------------------------ readiness */

Test(runpod, readiness_timeout_deletes_the_pod)
{
    tu_fake_post("/_fake/config", "{\"no_port\": true}");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_backend_options(o, "{\"create_timeout_secs\": 1.5, "
                                                 "\"poll_interval_secs\": 0.1}", NULL), 0);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_TIMEOUT, "%s", sbx_error_get0_message(err));
    const char *id = sbx_error_get0_context(err, "sandbox_id");
    cr_assert_not_null(id, "the error names no pod: %s", sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_context(err, "state"), "RUNNING, without a public port for 22");
    cr_assert_null(sbx_error_get0_context(err, "cleanup_error"));
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("/v2/pods/%s", id);
    cr_assert_eq(tu_fake_count(log, "DELETE", re, NULL, 0), 1);
    free(re);
    json_object_put(log);
    sbx_error_free(err);
    cr_assert_eq(fake_pod_count(), 0, "the pod was left");
}

/* ------------------------------------------------------------ cost */

Test(runpod, hourly_price_is_in_the_session_state)
{
    g_sb = create_with(NULL);
    sbx_error *err = NULL;
    char *state = sbx_sandbox_session_state(g_sb, &err);
    cr_assert_not_null(state);
    json_object *j = json_tokener_parse(state), *data = NULL, *c = NULL;
    cr_assert(json_object_object_get_ex(j, "data", &data), "%s", state);
    cr_assert(json_object_object_get_ex(data, "price_usd_per_hour", &c), "%s", state);
    cr_assert(strstr(state, "\"price_usd_per_hour\":0.69,"), "%s", state);
    cr_assert(!strstr(state, "sbx-test-dummy-key"));
    json_object_put(j);
    free(state);
}

/* The pod's live price (the fake's 0.69 USD/h for the RTX 4090, a GPU type
 * the price table has no rate for) prices the sandbox's usage: 0.69 / 3600
 * USD per second, per whole second (the table's granularity for runpod),
 * in the usage, in the ledger and after a resume. */
static int64_t live_cost(double seconds)
{
    /* 0.69 USD/h = 690000000000 pico-dollars per hour, whole seconds. */
    double billed = ceil(seconds - 1e-9);
    unsigned __int128 us = (unsigned __int128)(uint64_t)llround(billed * 1e6);
    return (int64_t)((us * 690000000000u + 1800000000u) / 3600000000u);
}

Test(runpod, the_pods_live_price_prices_its_usage)
{
    char *dir = tu_mkdtemp("sbx-rp-price");
    g_tmp_base = strdup(dir);   /* removed by the teardown, whatever happens */
    char *ledger = tu_strdup_printf("%s/ledger.jsonl", dir);
    cr_assert_eq(sbx_client_set_ledger(g_client, ledger, NULL), 0);
    g_sb = create_with(NULL);
    sbx_usage u = SBX_USAGE_INIT;
    cr_assert_eq(sbx_sandbox_get_usage(g_sb, &u, NULL), 0);
    cr_assert_eq(u.sandboxes, 1);
    cr_assert_eq(u.sandbox_cost_unknown, 0, "the live price was not taken");
    cr_assert_eq(u.sandbox_cost_pusd, live_cost(u.sandbox_seconds), "%lld for %.6f s",
                 (long long)u.sandbox_cost_pusd, u.sandbox_seconds);
    cr_assert_gt(u.sandbox_cost_pusd, 0);
    /* Resumed from its state: the same price. */
    char *state = sbx_sandbox_session_state(g_sb, NULL);
    cr_assert_not_null(state);
    sbx_sandbox *again = sbx_sandbox_resume(g_client, state, NULL);
    cr_assert_not_null(again);
    sbx_usage u2 = SBX_USAGE_INIT;
    cr_assert_eq(sbx_sandbox_get_usage(again, &u2, NULL), 0);
    cr_assert_eq(u2.sandbox_cost_unknown, 0);
    cr_assert_eq(u2.sandbox_cost_pusd, live_cost(u2.sandbox_seconds));
    sbx_sandbox_free(again);
    free(state);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    /* The ledger's records: the released resumed handle, then the
     * destroyed sandbox; both at the live rate. */
    FILE *f = fopen(ledger, "r");
    cr_assert_not_null(f, "no ledger");
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        json_object *rec = json_tokener_parse(line), *v = NULL;
        cr_assert_not_null(rec, "%s", line);
        cr_assert_str_eq(tu_json_str(rec, "kind"), "sandbox");
        cr_assert(strstr(line, "\"rate_usd_per_s\":0.000191666666667,"), "%s", line);
        cr_assert_str_eq(tu_json_str(rec, "rate_source"), "the provider's live price");
        cr_assert(json_object_object_get_ex(rec, "seconds", &v));
        double secs = json_object_get_double(v);
        cr_assert(json_object_object_get_ex(rec, "billed_seconds", &v));
        cr_assert_float_eq(json_object_get_double(v), ceil(secs - 1e-9), 1e-9, "%s", line);
        cr_assert(json_object_object_get_ex(rec, "compute_cost_usd", &v));
        int64_t pusd = 0;
        cr_assert_eq(sbx_usd_parse(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN),
                                   &pusd, NULL), 0);
        cr_assert_eq(pusd, live_cost(secs), "%s", line);
        json_object_put(rec);
        n++;
    }
    fclose(f);
    cr_assert_eq(n, 2);
    free(ledger);
    free(dir);
}

/* ------------------------------------------------------------ expiry */

typedef struct gc_seen {
    const char *id;
    int found, reaped;
    sbx_gc_reason reason;
} gc_seen;

static int on_gc(const sbx_gc_item *it, void *ud)
{
    gc_seen *g = ud;
    if (strcmp(it->backend, "runpod") == 0 && strcmp(it->id, g->id) == 0) {
        g->found++;
        g->reaped = it->reaped;
        g->reason = it->reason;
    }
    return 0;
}

/* RunPod has no lifetime: the expiry recorded with the pod is what sbx gc
 * goes by. A detached pod past its lifetime is reaped by gc, and the fake
 * has it no more. */
Test(runpod, gc_reaps_a_pod_past_its_recorded_expiry)
{
    char *state = tu_mkdtemp("sbx-rp-state");
    cr_assert_eq(setenv("SBX_STATE_DIR", state, 1), 0);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 2, NULL), 0);
    cr_assert_eq(sbx_options_set_detached(o, 1, NULL), 0);
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    char *id = strdup(sbx_sandbox_get0_id(sb));
    json_object *pod = fake_pod(id), *body = NULL, *env = NULL;
    cr_assert(json_object_object_get_ex(pod, "body", &body));
    cr_assert(json_object_object_get_ex(body, "env", &env));
    double exp = strtod(tu_json_str(env, "SBX_EXPIRES_AT"), NULL);
    cr_assert(exp > 0 && exp <= (double)time(NULL) + 3, "expiry %.0f", exp);
    json_object_put(pod);
    sbx_sandbox_free(sb);
    /* Until the lifetime has passed, gc leaves it. */
    gc_seen g = { id, 0, 0, 0 };
    sbx_error *err = NULL;
    cr_assert(sbx_gc(0, on_gc, &g, &err) >= 0, "gc: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(g.found, 0, "gc took a pod before its expiry");
    while ((double)time(NULL) <= exp + 1)
        usleep(100000);
    cr_assert(sbx_gc(0, on_gc, &g, &err) >= 1, "gc: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(g.found, 1);
    cr_assert_eq(g.reason, SBX_GC_EXPIRED);
    cr_assert_eq(g.reaped, 1);
    char *path = tu_strdup_printf("/_fake/pods/%s", id);
    cr_assert_eq(tu_fake_http("GET", path, NULL, NULL, NULL), 404, "the pod outlived gc");
    free(path);
    free(id);
    tu_rmtree(state);
    free(state);
}

/* ------------------------------------------------------------ CASE-31 */

static void sshd_action(sbx_sandbox *sb, const char *body)
{
    char *path = tu_strdup_printf("/_fake/pods/%s/sshd", sbx_sandbox_get0_id(sb));
    tu_fake_post(path, body);
    free(path);
}

Test(runpod, case31_255_is_an_exit_code_transport_failures_are_errors)
{
    const char *home = getenv("HOME");
    char *kh = tu_strdup_printf("%s/.ssh/known_hosts", home ? home : "/root");
    struct stat before;
    int had = stat(kh, &before) == 0;
    g_sb = create_with(NULL);
    json_object *pod = fake_pod(sbx_sandbox_get0_id(g_sb)), *rootv = NULL;
    cr_assert(json_object_object_get_ex(pod, "root", &rootv));
    char *marker = tu_strdup_printf("%s/tmp/ran_marker", json_object_get_string(rootv));
    json_object_put(pod);
    /* 1 */
    sbx_result *r = tu_sh(g_sb, "echo out; echo err >&2; exit 255", 20);
    tu_assert_exit(r, 255);
    tu_assert_stdout(r, "out\n");
    tu_assert_stderr(r, "err\n");
    sbx_result_free(r);
    /* 2: the server's end takes the master with it (awaited, so that the
     * command finds no connection rather than losing one on the way). */
    pid_t m = master_pid(pod_port(g_sb));
    cr_assert(m > 0);
    sshd_action(g_sb, "{\"action\": \"stop\"}");
    cr_assert(wait_state(m, 'Z'), "the master outlived its server");
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo hi";
    req.timeout_secs = 20;
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_execute_command(g_sb, &req, &err), "a result without sshd");
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONNECTION, "%s",
                 sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "connection_refused");
    sbx_error_free(err);
    /* 3 */
    sshd_action(g_sb, "{\"action\": \"start\", \"new_host_key\": true}");
    req.shell = "touch /tmp/ran_marker";
    err = NULL;
    cr_assert_null(sbx_sandbox_execute_command(g_sb, &req, &err), "ran with a changed host key");
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_AUTHENTICATION, "%s",
                 sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "host_key_mismatch");
    sbx_error_free(err);
    cr_assert(!tu_exists(marker), "the command ran under a changed host key");
    /* 4 */
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = create_with(NULL);
    r = tu_sh(g_sb, "echo fresh", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "fresh\n");
    sbx_result_free(r);
    struct stat after;
    if (had) {
        cr_assert_eq(stat(kh, &after), 0);
        cr_assert_eq(after.st_mtime, before.st_mtime, "%s was written", kh);
        cr_assert_eq(after.st_size, before.st_size, "%s was written", kh);
    } else {
        cr_assert(!tu_exists(kh), "%s was made", kh);
    }
    free(marker);
    free(kh);
}

/* Entries named sbx-ssh-* (the plugin's private ssh directories) in @dir. */
static int ssh_dirs_in(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, "sbx-ssh-", 8) == 0;
    closedir(d);
    return n;
}

/* A fresh g_client whose plugin (and plugin host, started with the client)
 * makes its directories under a new directory of its own, @prefix-XXXXXX,
 * removed by the teardown: returned; the TMPDIR it replaced is in
 * *@old_tmp (NULL when none), for end_client_expect_no_ssh_directory(). */
static char *client_in_own_tmpdir(const char *prefix, char **old_tmp)
{
    char *dir = tu_mkdtemp(prefix);
    g_tmp_base = strdup(dir);
    const char *ot = getenv("TMPDIR");
    *old_tmp = ot ? strdup(ot) : NULL;
    sbx_client_free(g_client);
    setenv("TMPDIR", dir, 1);
    sbx_error *err = NULL;
    g_client = sbx_client_new("runpod", &err);
    cr_assert_not_null(g_client, "sbx_client_new: %s", err ? sbx_error_get0_message(err) : "");
    return dir;
}

/* Destroys and frees g_sb, frees g_client, and asserts that no ssh
 * directory is left in @dir once the plugin host has ended on its own
 * (waiting up to 5 s); then puts @old_tmp back as TMPDIR and frees both. */
static void end_client_expect_no_ssh_directory(char *dir, char *old_tmp)
{
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    sbx_client_free(g_client);
    g_client = NULL;
    int left = ssh_dirs_in(dir);
    for (int i = 0; i < 250 && left; i++) {
        usleep(20000);
        left = ssh_dirs_in(dir);
    }
    cr_assert_eq(left, 0, "%d ssh directories left in %s", left, dir);
    if (old_tmp)
        setenv("TMPDIR", old_tmp, 1);
    else
        unsetenv("TMPDIR");
    free(old_tmp);
    free(dir);
}

/* A resumed handle that ran nothing, freed before its sandbox is destroyed
 * through another: its ssh directory (its known_hosts holds the pod's key)
 * is gone once the client is, out of process too, where the plugin host
 * frees such a handle only at its end. */
Test(runpod, a_freed_resumed_handle_leaves_no_ssh_directory)
{
    char *old_tmp = NULL;
    char *dir = client_in_own_tmpdir("sbx-rp-free", &old_tmp);
    g_sb = create_with(NULL);
    sbx_result *r = tu_sh(g_sb, "echo one", 20);
    tu_assert_stdout(r, "one\n");
    sbx_result_free(r);
    char *state = sbx_sandbox_session_state(g_sb, NULL);
    cr_assert_not_null(state);
    sbx_sandbox *again = sbx_sandbox_resume(g_client, state, NULL);
    cr_assert_not_null(again);
    free(state);
    /* No command on it: no ssh master, whose janitor would remove the
     * directory when the host exits. */
    cr_assert_eq(ssh_dirs_in(dir), 2, "one directory per handle");
    sbx_sandbox_free(again);
    end_client_expect_no_ssh_directory(dir, old_tmp);
}

/* A process holding a resumed handle ends without freeing it (as a crash
 * would): first before it ran anything (no ssh master yet), then after a
 * command (its master runs). Neither its ssh directory nor its master
 * outlives it, in both plugin modes: the directory's janitor ends them. */
Test(runpod, a_crashed_owner_leaves_no_ssh_directory_nor_master)
{
    char *dir = tu_mkdtemp("sbx-rp-crash");
    g_tmp_base = strdup(dir);
    g_sb = create_with(NULL);
    char *state = sbx_sandbox_session_state(g_sb, NULL);
    cr_assert_not_null(state);
    int port = pod_port(g_sb);
    int masters = ssh_procs("ControlMaster=yes", port);
    cr_assert_eq(masters, 1, "the creating handle's master");
    for (int run = 0; run < 2; run++) {
        pid_t child = fork();
        cr_assert(child >= 0);
        if (child == 0) {
            setenv("TMPDIR", dir, 1);
            sbx_client *c = sbx_client_new("runpod", NULL);
            sbx_sandbox *sb = c ? sbx_sandbox_resume(c, state, NULL) : NULL;
            if (!sb)
                _exit(2);
            if (run == 1) {
                sbx_result *r = sbx_sandbox_execute_shell(sb, "true", NULL);
                if (!r || sbx_result_get_exit_code(r) != 0)
                    _exit(3);
            }
            _exit(0);   /* nothing freed */
        }
        int st;
        cr_assert_eq(waitpid(child, &st, 0), child);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "run %d: status %#x", run, st);
        int left = ssh_dirs_in(dir), procs = ssh_procs("ControlMaster=yes", port);
        for (int i = 0; i < 250 && (left || procs != masters); i++) {
            usleep(20000);
            left = ssh_dirs_in(dir);
            procs = ssh_procs("ControlMaster=yes", port);
        }
        cr_assert_eq(left, 0, "run %d: %d ssh directories left in %s", run, left, dir);
        cr_assert_eq(procs, masters, "run %d: %d ssh masters for port %d", run, procs, port);
    }
    /* The first handle still works. */
    sbx_result *r = tu_sh(g_sb, "echo still", 20);
    tu_assert_stdout(r, "still\n");
    sbx_result_free(r);
    free(state);
    free(dir);
}

/* One sandbox resumed, used and freed over and over on one client (a
 * request loop): each freed handle's ssh directory and master go when it
 * is freed, out of process too (where the plugin host keeps one handle of
 * a live sandbox to destroy it at the end, not every one): after each
 * free, one directory and one master are left, the creating handle's. */
Test(runpod, a_sandbox_resumed_and_freed_in_a_loop_keeps_one_ssh_directory)
{
    char *old_tmp = NULL;
    char *dir = client_in_own_tmpdir("sbx-rp-loop", &old_tmp);
    g_sb = create_with(NULL);
    sbx_result *r = tu_sh(g_sb, "echo one", 20);
    tu_assert_stdout(r, "one\n");
    sbx_result_free(r);
    int port = pod_port(g_sb);
    char *state = sbx_sandbox_session_state(g_sb, NULL);
    cr_assert_not_null(state);
    for (int i = 0; i < 4; i++) {
        sbx_sandbox *h = sbx_sandbox_resume(g_client, state, NULL);
        cr_assert_not_null(h, "resume %d", i);
        r = tu_sh(h, "echo again", 20);
        tu_assert_stdout(r, "again\n");
        sbx_result_free(r);
        cr_assert_eq(ssh_dirs_in(dir), 2, "round %d: the creator's and this handle's", i);
        cr_assert_eq(ssh_procs("ControlMaster=yes", port), 2, "round %d: two masters", i);
        sbx_sandbox_free(h);
        int left = ssh_dirs_in(dir), masters = ssh_procs("ControlMaster=yes", port);
        for (int t = 0; t < 250 && (left != 1 || masters != 1); t++) {
            usleep(20000);
            left = ssh_dirs_in(dir);
            masters = ssh_procs("ControlMaster=yes", port);
        }
        cr_assert_eq(left, 1, "round %d: %d ssh directories in %s", i, left, dir);
        cr_assert_eq(masters, 1, "round %d: %d ssh masters for port %d", i, masters, port);
    }
    free(state);
    /* The creating handle still works. */
    r = tu_sh(g_sb, "echo still", 20);
    tu_assert_stdout(r, "still\n");
    sbx_result_free(r);
    end_client_expect_no_ssh_directory(dir, old_tmp);
}

/* The ssh directory's janitor signals the pid in DIR/pid only while that
 * process is the directory's master: a process holding a resumed handle
 * runs a command (its master starts and DIR/pid names it), then, as if the
 * master had ended and its pid been reused before the janitor looked,
 * DIR/pid names another process of this user (a sleep), and the holder
 * ends without freeing anything. The sleep lives on, the directory is
 * removed, and the master, whose pid the janitor no longer knows, is the
 * test's to end. */
Test(runpod, the_janitor_signals_no_process_but_the_master)
{
    char *dir = tu_mkdtemp("sbx-rp-reuse");
    g_tmp_base = strdup(dir);
    g_sb = create_with(NULL);
    char *state = sbx_sandbox_session_state(g_sb, NULL);
    cr_assert_not_null(state);
    pid_t other = fork();
    cr_assert(other >= 0);
    if (other == 0) {
        execlp("sleep", "sleep", "60", (char *)NULL);
        _exit(127);
    }
    int pp[2];
    cr_assert_eq(pipe(pp), 0);
    pid_t child = fork();
    cr_assert(child >= 0);
    if (child == 0) {
        close(pp[0]);
        setenv("TMPDIR", dir, 1);
        sbx_client *c = sbx_client_new("runpod", NULL);
        sbx_sandbox *sb = c ? sbx_sandbox_resume(c, state, NULL) : NULL;
        if (!sb)
            _exit(2);
        sbx_result *r = sbx_sandbox_execute_shell(sb, "true", NULL);
        if (!r || sbx_result_get_exit_code(r) != 0)
            _exit(3);
        DIR *d = opendir(dir);
        struct dirent *e;
        char pidfile[4096] = "";
        while (d && (e = readdir(d)))
            if (strncmp(e->d_name, "sbx-ssh-", 8) == 0)
                snprintf(pidfile, sizeof pidfile, "%s/%s/pid", dir, e->d_name);
        if (d)
            closedir(d);
        FILE *f = pidfile[0] ? fopen(pidfile, "r") : NULL;
        int master = 0;
        if (!f || fscanf(f, "%d", &master) != 1)
            _exit(4);
        fclose(f);
        f = fopen(pidfile, "w");
        if (!f || fprintf(f, "%d\n", (int)other) < 0 || fclose(f) != 0)
            _exit(5);
        if (write(pp[1], &master, sizeof master) != (ssize_t)sizeof master)
            _exit(6);
        _exit(0);   /* nothing freed */
    }
    close(pp[1]);
    int master = 0;
    cr_assert_eq(read(pp[0], &master, sizeof master), (ssize_t)sizeof master);
    close(pp[0]);
    int st;
    cr_assert_eq(waitpid(child, &st, 0), child);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
    int left = ssh_dirs_in(dir);
    for (int i = 0; i < 250 && left; i++) {
        usleep(20000);
        left = ssh_dirs_in(dir);
    }
    cr_assert_eq(left, 0, "%d ssh directories left in %s", left, dir);
    /* The janitor has run (the directory is gone): the sleep was spared. */
    cr_assert_eq(waitpid(other, &st, WNOHANG), 0, "the janitor signalled pid %d: status %#x",
                 (int)other, st);
    cr_assert_eq(kill(other, SIGKILL), 0);
    cr_assert_eq(waitpid(other, &st, 0), other);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status %#x", st);
    cr_assert(master > 1);
    cr_assert_eq(kill(master, SIGTERM), 0, "the master %d: %s", master, strerror(errno));
    cr_assert(tu_wait_pid_gone(master, 5.0), "the master %d lives on", master);
    /* The first handle still works. */
    sbx_result *r = tu_sh(g_sb, "echo still", 20);
    tu_assert_stdout(r, "still\n");
    sbx_result_free(r);
    free(state);
    free(dir);
}

/* ------------------------------------------------------------ CASE-29 */

static int g_longest;
static int g_sockets;

static void find_sockets(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "sbx-ssh-", 8) != 0)
            continue;
        char *sock = tu_strdup_printf("%s/%s/c", dir, e->d_name);
        struct stat st;
        if (lstat(sock, &st) == 0 && S_ISSOCK(st.st_mode)) {
            g_sockets++;
            if ((int)strlen(sock) > g_longest)
                g_longest = (int)strlen(sock);
        }
        free(sock);
    }
    closedir(d);
}

/* CASE-29's names: a 32-byte user and a 60-byte host alias. */
#define CASE29_USER "sbx-case29-user-xxxxxxxxxxxxxxxx"
#define CASE29_HOST "sbx-case29-host-alias-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.test"

/* Makes CASE29_HOST resolve to 127.0.0.1 for this test process and its
 * children (the plugin host, ssh): /etc/hosts plus one line, in a file
 * under @dir bound over /etc/hosts in a mount namespace of its own. */
static void case29_hosts(const char *dir)
{
    cr_assert_eq(unshare(CLONE_NEWNS), 0, "unshare: %s", strerror(errno));
    cr_assert_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0, "mount: %s",
                 strerror(errno));
    char *path = tu_strdup_printf("%s/hosts", dir);
    FILE *in = fopen("/etc/hosts", "r"), *out = fopen(path, "w");
    cr_assert(in && out);
    char line[1024];
    while (fgets(line, sizeof line, in))
        fputs(line, out);
    fprintf(out, "127.0.0.1 %s\n", CASE29_HOST);
    fclose(in);
    cr_assert_eq(fclose(out), 0);
    cr_assert_eq(mount(path, "/etc/hosts", NULL, MS_BIND, NULL), 0, "bind: %s",
                 strerror(errno));
    free(path);
}

Test(runpod, case29_control_socket_fits_with_long_directories_user_and_host)
{
    cr_assert_eq(strlen(CASE29_USER), 32);
    cr_assert_eq(strlen(CASE29_HOST), 60);
    /* One 80-byte directory as TMPDIR, HOME and XDG_RUNTIME_DIR, before
     * the client (and its plugin host) exists. */
    sbx_client_free(g_client);
    char *base = tu_mkdtemp("sbx-rp29");
    g_tmp_base = strdup(base);
    char *dir = tu_strdup_printf("%s/", base);
    while (strlen(dir) < 80) {
        char *longer = tu_strdup_printf("%sx", dir);
        free(dir);
        dir = longer;
    }
    cr_assert_eq(strlen(dir), 80);
    cr_assert_eq(mkdir(dir, 0700), 0);
    char *old_home = strdup(getenv("HOME") ? getenv("HOME") : "/root");
    const char *ot = getenv("TMPDIR");
    char *old_tmp = ot ? strdup(ot) : NULL;
    setenv("TMPDIR", dir, 1);
    setenv("HOME", dir, 1);
    setenv("XDG_RUNTIME_DIR", dir, 1);
    case29_hosts(dir);
    tu_fake_post("/_fake/config", "{\"login_user\": \"" CASE29_USER "\", "
                 "\"public_host\": \"" CASE29_HOST "\"}");
    sbx_error *err = NULL;
    g_client = sbx_client_new("runpod", &err);
    cr_assert_not_null(g_client);
    g_sb = create_with("{\"ssh_user\": \"" CASE29_USER "\"}");
    /* The login is the long user's. */
    sbx_result *who = tu_sh(g_sb, "printf %s \"$LOGNAME\"", 20);
    tu_assert_exit(who, 0);
    tu_assert_stdout(who, CASE29_USER);
    sbx_result_free(who);
    for (int i = 0; i < 3; i++) {
        sbx_result *r = tu_sh(g_sb, "echo ok", 20);
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, "ok\n");
        size_t n;
        const char *e = sbx_result_get0_stderr(r, &n);
        cr_assert(!memmem(e, n, "too long", 8));
        sbx_result_free(r);
    }
    g_longest = g_sockets = 0;
    find_sockets(dir);
    find_sockets("/tmp");
    cr_assert(g_sockets >= 1, "no control socket found");
    cr_assert(g_longest <= 90, "a control socket path of %d bytes", g_longest);
    cr_assert_eq(ssh_procs("ControlMaster=yes", pod_port(g_sb)), 1);
    /* The one master speaks to the alias as the long user. */
    cr_assert_eq(ssh_procs(CASE29_HOST, pod_port(g_sb)), 1);
    cr_assert_eq(ssh_procs(CASE29_USER, pod_port(g_sb)), 1);
    setenv("HOME", old_home, 1);
    if (old_tmp)
        setenv("TMPDIR", old_tmp, 1);
    else
        unsetenv("TMPDIR");
    unsetenv("XDG_RUNTIME_DIR");
    free(old_home);
    free(old_tmp);
    free(dir);
    free(base);
}

/* ------------------------------------------------------------ the master */

/* The pid of the one control master for @port. */
static pid_t master_pid(int port)
{
    char want_port[32];
    snprintf(want_port, sizeof want_port, "%d", port);
    DIR *d = opendir("/proc");
    struct dirent *e;
    pid_t found = 0;
    while ((e = readdir(d))) {
        char path[300], buf[8192];
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        if (len == 0 || strcmp(buf, "ssh") != 0)
            continue;
        int m = 0, p = 0, prev_p = 0;
        for (size_t i = 0; i < len; i += strlen(buf + i) + 1) {
            m |= strcmp(buf + i, "ControlMaster=yes") == 0;
            p |= prev_p && strcmp(buf + i, want_port) == 0;
            prev_p = strcmp(buf + i, "-p") == 0;
        }
        if (m && p)
            found = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    return found;
}

/* Waits up to 5 s until @pid is in state @want ('Z': has died, and its
 * parent has not reaped it yet; also when it is gone; 'T': stopped): 1
 * when it is. */
static int wait_state(pid_t pid, char want)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(path, "r");
        if (!f)
            return want == 'Z';
        char buf[512] = "";
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        char *rp = strrchr(buf, ')');
        if (rp && rp[1] == ' ' && rp[2] == want)
            return 1;
        usleep(10000);
    }
    return 0;
}

Test(runpod, one_master_replaced_when_dead_or_stopped_closed_at_destroy)
{
    g_sb = create_with(NULL);
    int port = pod_port(g_sb);
    for (int i = 0; i < 5; i++) {
        sbx_result *r = tu_sh(g_sb, "true", 20);
        tu_assert_exit(r, 0);
        sbx_result_free(r);
    }
    cr_assert_eq(ssh_procs("ControlMaster", port), 1, "more than the master runs");
    pid_t m1 = master_pid(port);
    cr_assert(m1 > 0);
    /* Killed: replaced at the next command. */
    kill(m1, SIGKILL);
    cr_assert(wait_state(m1, 'Z'));
    sbx_result *r = tu_sh(g_sb, "echo again", 20);
    tu_assert_stdout(r, "again\n");
    sbx_result_free(r);
    pid_t m2 = master_pid(port);
    cr_assert(m2 > 0 && m2 != m1, "no new master (%d, was %d)", (int)m2, (int)m1);
    cr_assert(tu_wait_pid_gone(m1, 5.0), "the dead master was not reaped");
    /* Stopped (wedged): replaced, never a hang. */
    kill(m2, SIGSTOP);
    cr_assert(wait_state(m2, 'T'));
    /* A hang would end by the exec's timeout (exit 124, no output). */
    r = tu_sh(g_sb, "echo still", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "still\n");
    sbx_result_free(r);
    pid_t m3 = master_pid(port);
    cr_assert(m3 > 0 && m3 != m2, "the stopped master was kept");
    cr_assert(tu_wait_pid_gone(m2, 5.0), "the stopped master was left");
    cr_assert_eq(ssh_procs("ControlMaster", port), 1);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    cr_assert(tu_wait_pid_gone(m3, 5.0), "the master outlived destroy");
    cr_assert_eq(ssh_procs("-p", port), 0, "an ssh process outlived destroy");
}

/* A master stopped while a command runs over it (once the command has
 * started: before, the client falls back to a connection of its own): the
 * command fails as a lost connection (no hang: the request's own 30 s
 * timeout would give exit 124 instead), and the next command gets a new
 * master. */
Test(runpod, master_stopped_mid_command_fails_it_and_is_replaced)
{
    g_sb = create_with(NULL);
    int port = pod_port(g_sb);
    json_object *pod = fake_pod(sbx_sandbox_get0_id(g_sb)), *rootv = NULL;
    cr_assert(json_object_object_get_ex(pod, "root", &rootv));
    char *started = tu_strdup_printf("%s/tmp/started", json_object_get_string(rootv));
    json_object_put(pod);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "touch /tmp/started; sleep 5; echo late";
    req.timeout_secs = 30;
    sbx_error *err = NULL;
    sbx_process *p = sbx_sandbox_start_process(g_sb, &req, &err);
    cr_assert_not_null(p, "start_process: %s", err ? sbx_error_get0_message(err) : "");
    for (int i = 0; i < 1000 && !tu_exists(started); i++)
        usleep(10000);
    cr_assert(tu_exists(started), "the command did not start");
    free(started);
    pid_t m = master_pid(port);
    cr_assert(m > 0);
    kill(m, SIGSTOP);
    cr_assert(wait_state(m, 'T'));
    int code = -1;
    sbx_result *r = NULL;
    int rc = sbx_process_wait(p, -1, &code, &r, &err);
    cr_assert_eq(rc, -1, "the command ended with %d through a stopped master", code);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONNECTION, "%s",
                 sbx_error_get0_message(err));
    sbx_error_free(err);
    sbx_process_free(p);
    cr_assert(wait_state(m, 'Z'), "the stopped master was left");
    r = tu_sh(g_sb, "echo next", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "next\n");
    sbx_result_free(r);
    pid_t m2 = master_pid(port);
    cr_assert(m2 > 0 && m2 != m, "no new master");
    cr_assert_eq(ssh_procs("ControlMaster", port), 1);
}

/* ------------------------------------------------------------ CASE-52 A */

/* The plugin's keepalive is ServerAliveInterval 5 s: the reaper cuts a
 * connection after 1.5 x 5 s without a byte. The sandbox is resumed
 * through the reaper (the fake reports the reaper's port). */
Test(runpod, case52_quiet_command_survives_an_idle_reaper_slow, .timeout = 120)
{
    g_sb = create_with(NULL);
    int rport = tu_reaper_start(pod_port(g_sb), 8);
    char *path = tu_strdup_printf("/_fake/pods/%s/port", sbx_sandbox_get0_id(g_sb));
    char *body = tu_strdup_printf("{\"public\": %d}", rport);
    tu_fake_post(path, body);
    sbx_error *err = NULL;
    char *state = sbx_sandbox_session_state(g_sb, &err);
    cr_assert_not_null(state);
    sbx_sandbox *sb2 = sbx_resume(state, &err);
    cr_assert_not_null(sb2, "resume: %s", err ? sbx_error_get0_message(err) : "");
    double t0 = tu_now();
    sbx_result *r = tu_sh(sb2, "sleep 12; echo done", 60);
    double dt = tu_now() - t0;
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "done\n");
    cr_assert(dt >= 12.0 && dt < 16.0, "took %.2f s", dt);
    sbx_result_free(r);
    cr_assert_eq(ssh_procs("ControlMaster", rport), 1, "the master through the reaper");
    sbx_sandbox_free(sb2);
    cr_assert_eq(tu_reaper_stop(), 0, "the reaper cut a connection");
    free(state);
    free(path);
    free(body);
}
