/*
 * test_cloudflare.c — what only the cloudflare backend does, through its
 * contract fake of the Sandbox Bridge worker (tests/cloudflare.sh starts it
 * and runs this program with SBX_TEST_BACKEND=cloudflare): an "error"
 * event of the exec stream is the command's error, never an exit 0
 * (exec_error: execution_failed; exec_transport_error: connection, outcome
 * unknown); files under /workspace go straight to the bridge's file route
 * while others are staged there and moved by a command; the bridge's 403
 * is a configuration error naming the path; the worker's settings (cpu,
 * image, network) are configuration errors naming the option; create is
 * POST /v1/sandbox and destroy DELETE /v1/sandbox/{id}, with the bearer
 * key; a client without the worker's URL says where to set it; a sandbox
 * deleted elsewhere is gone although the bridge would start a fresh
 * container for its id; a snapshot is the workspace's tar kept on
 * the client's side; the lifetime, which the bridge cannot carry, is kept
 * by a process in the container (a 2 s one ends the sandbox's commands and
 * files by 4 s; calls after it are not_found naming the expiry, and a
 * resume then deletes the sandbox); text the bridge's JSON cannot carry is
 * refused before anything is sent (issue 16). The fake's routes
 * (/_fake/exec_error, /_fake/faults, /_fake/log) script and count requests.
 */
#include "testutil.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <sbx/sbx.h>

static sbx_client *g_client;
static sbx_sandbox *g_sb;

static void setup(void)
{
    sbx_error *err = NULL;
    cr_assert_str_eq(tu_backend(), "cloudflare", "run by tests/cloudflare.sh");
    tu_fake_use("CLOUDFLARE_SANDBOX_WORKER_URL");
    tu_fake_reset();
    g_client = sbx_client_new("cloudflare", &err);
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
    tu_fake_reset();
}

TestSuite(cloudflare, .init = setup, .fini = teardown, .timeout = 60);

static sbx_sandbox *create_plain(void)
{
    sbx_options *o = sbx_options_new();
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    return sb;
}

/* Issue 16: what the bridge's JSON cannot carry (a byte that is not UTF-8
 * in an argument, the shell command, the cwd; a path of write_file, whose
 * chmod or move is a command, of list_files, a command, or of read_file
 * outside /workspace, a command) is invalid_argument naming the part,
 * before anything is sent; an env value goes in a staged file and arrives
 * exact (testutil.c). A read under /workspace goes in the URL, which
 * carries any byte: a file that is not there is not_found. */
Test(cloudflare, text_json_cannot_carry_is_refused_before_sending)
{
    g_sb = create_plain();
    tu_json_text_refused("cloudflare", g_sb, TU_TEXT_WRITE | TU_TEXT_READ | TU_TEXT_LIST
                                             | TU_TEXT_ENV_AS_BYTES);
    char *data = NULL;
    size_t len = 0;
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, "/workspace/\xff\xfe", &data, &len, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND, "%s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
    sbx_error_free(err);
}

static sbx_error *exec_with_error_event(const char *code)
{
    g_sb = create_plain();
    char *body = tu_strdup_printf("{\"error\":\"boom\",\"code\":\"%s\",\"stdout\":\"partial\"}",
                                  code);
    tu_fake_post("/_fake/exec_error", body);
    free(body);
    return tu_exec_fail(g_sb, &(sbx_exec_request){ .struct_size = sizeof(sbx_exec_request),
                                                   .shell = "echo never" },
                        strcmp(code, "exec_error") == 0 ? SBX_ERROR_EXECUTION_FAILED
                                                        : SBX_ERROR_CONNECTION);
}

Test(cloudflare, an_exec_error_event_is_an_error_not_exit_0)
{
    sbx_error *err = exec_with_error_event("exec_error");
    cr_assert_str_eq(sbx_error_get0_message(err), "cloudflare exec failed: boom (exec_error)");
    cr_assert_str_eq(sbx_error_get0_context(err, "code"), "exec_error");
    sbx_error_free(err);
    /* The sandbox runs on. */
    sbx_result *r = tu_sh(g_sb, "echo still", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "still\n");
    sbx_result_free(r);
}

Test(cloudflare, a_transport_error_event_is_a_connection_error)
{
    sbx_error *err = exec_with_error_event("exec_transport_error");
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "cloudflare exec failed: boom (exec_transport_error)");
    cr_assert_str_eq(sbx_error_get0_context(err, "code"), "exec_transport_error");
    sbx_error_free(err);
}

static int count(const char *method, const char *re)
{
    json_object *log = tu_fake_log();
    int n = tu_fake_count(log, method, re, NULL, 0);
    json_object_put(log);
    return n;
}

Test(cloudflare, workspace_files_use_the_file_route_others_are_staged)
{
    g_sb = create_plain();
    const char *id = sbx_sandbox_get0_id(g_sb);
    static const char bytes[] = { 'a', 0, '\n', (char)0xff, 'z' };
    sbx_error *err = NULL;
    tu_fake_reset();
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/workspace/d/in.bin", bytes, sizeof bytes, &err),
                 0, "write_file: %s", err ? sbx_error_get0_message(err) : "");
    char *re = tu_strdup_printf("/v1/sandbox/%s/file/workspace/d/in\\.bin", id);
    cr_assert_eq(count("PUT", re), 1);
    free(re);
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/tmp/out.bin", bytes, sizeof bytes, &err), 0,
                 "write_file: %s", err ? sbx_error_get0_message(err) : "");
    re = tu_strdup_printf("/v1/sandbox/%s/file/workspace/\\.sbx-[0-9a-f]{24}\\.up", id);
    cr_assert_eq(count("PUT", re), 1);
    free(re);
    re = tu_strdup_printf("/v1/sandbox/%s/file/tmp/.*", id);
    cr_assert_eq(count("PUT", re), 0);
    free(re);
    /* Both read back exact, through the route and through cat. */
    const char *paths[] = { "/workspace/d/in.bin", "/tmp/out.bin" };
    for (int i = 0; i < 2; i++) {
        char *data = NULL;
        size_t len = 0;
        cr_assert_eq(sbx_sandbox_read_file(g_sb, paths[i], &data, &len, &err), 0,
                     "read_file %s: %s", paths[i], err ? sbx_error_get0_message(err) : "");
        cr_assert_eq(len, sizeof bytes);
        cr_assert_eq(memcmp(data, bytes, len), 0);
        free(data);
    }
    /* Nothing staged is left in /workspace. */
    sbx_result *r = tu_sh(g_sb, "ls -A /workspace", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "d\n");
    sbx_result_free(r);
}

Test(cloudflare, the_bridges_403_is_a_configuration_error_naming_the_path)
{
    g_sb = create_plain();
    tu_fake_post("/_fake/faults", "{\"method\":\"GET\",\"path\":\"/file/workspace/x\","
                                  "\"status\":403,\"message\":\"outside the workspace\"}");
    sbx_error *err = NULL;
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, "/workspace/x", &data, &len, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(err), "cloudflare bridge refused /workspace/x: the "
                     "Sandbox Bridge serves files under /workspace only");
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), "/workspace/x");
    sbx_error_free(err);
}

Test(cloudflare, the_workers_settings_are_configuration_errors)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 2, NULL), 0);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(err), "cloudflare backend: cpu 2: the container's "
                     "instance type is the worker's setting (wrangler.jsonc "
                     "containers.instance_type), not per sandbox");
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "cpu");
    sbx_error_free(err);
    err = NULL;
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "allow_internet");
    sbx_error_free(err);
    /* Nothing was asked of the bridge. */
    cr_assert_eq(count("POST", "/v1/sandbox"), 0);
}

/* A client without the worker's URL says where to set it (a bad one is
 * named by the base). */
Test(cloudflare, a_client_without_a_worker_url_says_where_to_set_it)
{
    unsetenv("CLOUDFLARE_SANDBOX_WORKER_URL");
    sbx_error *err = NULL;
    cr_assert_null(sbx_client_new("cloudflare", &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(err), "cloudflare backend: no Sandbox Bridge worker "
                     "URL (set CLOUDFLARE_SANDBOX_WORKER_URL or the client option worker_url "
                     "to the deployed bridge, e.g. https://sandbox-bridge.NAME.workers.dev)");
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "worker_url");
    sbx_error_free(err);
    err = NULL;
    setenv("CLOUDFLARE_SANDBOX_WORKER_URL", "ftp://127.0.0.1:9", 1);
    cr_assert_null(sbx_client_new("cloudflare", &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(err), "CLOUDFLARE_SANDBOX_WORKER_URL: the base URL "
                     "\"ftp://127.0.0.1:9\" is not an http:// or https:// URL");
    sbx_error_free(err);
}

Test(cloudflare, create_and_destroy_are_the_bridges_post_and_delete)
{
    g_sb = create_plain();
    const char *id = sbx_sandbox_get0_id(g_sb);
    cr_assert_eq(strlen(id), 26);
    cr_assert_eq(strspn(id, "abcdefghijklmnopqrstuvwxyz234567"), 26);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/v1/sandbox", NULL, 0), 1);
    json_object *first = json_object_array_get_idx(log, 0);
    cr_assert_str_eq(tu_json_str(first, "auth"), "Bearer <redacted>");
    json_object_put(log);
    char *re = tu_strdup_printf("/v1/sandbox/%s", id);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    cr_assert_eq(count("DELETE", re), 1);
    /* A second destroy sends nothing. */
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    cr_assert_eq(count("DELETE", re), 1);
    free(re);
}

Test(cloudflare, a_sandbox_deleted_elsewhere_is_gone_and_its_fresh_container_deleted)
{
    g_sb = create_plain();
    const char *id = sbx_sandbox_get0_id(g_sb);
    char *path = tu_strdup_printf("/v1/sandbox/%s", id);
    char *auth = tu_strdup_printf("Authorization: Bearer %s", getenv("CLOUDFLARE_SANDBOX_API_KEY"));
    cr_assert_eq(tu_fake_http("DELETE", path, auth, NULL, NULL), 204);
    tu_fake_reset();
    sbx_error *err = tu_exec_fail(g_sb, &(sbx_exec_request){
                                      .struct_size = sizeof(sbx_exec_request),
                                      .shell = "echo hi" }, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    sbx_error_free(err);
    char *re = tu_strdup_printf("/v1/sandbox/%s", id);
    cr_assert_eq(count("DELETE", re), 1);
    free(re);
    free(path);
    free(auth);
}

/* How many processes of this host mention @s (as tu_procs_mentioning). */
static size_t procs(const char *s)
{
    pid_t pids[64];
    return tu_procs_mentioning(s, pids, 64);
}

/* The fake container's root on this host (/_fake/sandbox/ID's "root"). */
static char *container_root(const char *id)
{
    char *path = tu_strdup_printf("/_fake/sandbox/%s", id), *body = NULL;
    cr_assert_eq(tu_fake_http("GET", path, NULL, NULL, &body), 200);
    json_object *j = json_tokener_parse(body);
    char *root = strdup(tu_json_str(j, "root"));
    json_object_put(j);
    free(body);
    free(path);
    return root;
}

/*
 * A 2 s lifetime, which the bridge cannot carry: the keeper the first
 * command starts in the container ends, by 4 s after create, every command
 * of the sandbox (a background one here), its files in /workspace and the
 * file that marks it live; a command then is not_found "sandbox ID expired
 * at T (lifetime 2 s)" with T its expiry, and nothing is sent for it; a
 * resume from its session state says the same and deletes the sandbox
 * (DELETE: what sbx_gc() does with an expired row).
 */
Test(cloudflare, a_two_second_lifetime_ends_the_sandbox)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 2.0, NULL), 0);
    double wall0 = (double)time(NULL);
    g_sb = tu_create(g_client, o);
    double t0 = tu_now();
    sbx_options_free(o);
    char *id = strdup(sbx_sandbox_get0_id(g_sb));
    char *root = container_root(id);
    char *file = tu_strdup_printf("%s/workspace/f.txt", root);
    char *live = tu_strdup_printf("%s/var/lib/sbx/live", root);
    char *state = sbx_sandbox_session_state(g_sb, NULL);
    cr_assert_not_null(state);
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/workspace/f.txt", "kept\n", 5, NULL), 0);
    sbx_result *r = tu_sh(g_sb, "sleep 4321.5 >/dev/null 2>&1 & echo started", 30);
    tu_assert_stdout(r, "started\n");
    sbx_result_free(r);
    cr_assert(tu_exists(file) && tu_exists(live), "%s, %s", file, live);
    cr_assert_gt(procs("4321.5"), 0, "no background command");

    double took;
    for (;;) {
        took = tu_now() - t0;
        if (!tu_exists(file) && !tu_exists(live) && procs("4321.5") == 0)
            break;
        cr_assert_leq(took, 4.0, "%.2f s after create: file %d, live %d, command %zu", took,
                      tu_exists(file), tu_exists(live), procs("4321.5"));
        usleep(50 * 1000);
    }
    fprintf(stderr, "# cloudflare: the sandbox's commands and files gone %.3f s after create "
            "(lifetime 2 s)\n", took);
    cr_assert_geq(took, 2.0, "the sandbox ended %.3f s after create, before its lifetime", took);

    tu_fake_reset();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "true";
    req.timeout_secs = 30;
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    char *want = tu_assert_expired(err, id, wall0, took, 2.0);
    sbx_error_free(err);
    char *re = tu_strdup_printf("/v1/sandbox/%s", id);
    cr_assert_eq(count("POST", "/v1/sandbox/.*/exec"), 0, "a command was sent after the expiry");
    cr_assert_eq(count("DELETE", re), 0);
    err = NULL;
    cr_assert_null(sbx_sandbox_resume(g_client, state, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND, "%s", sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    sbx_error_free(err);
    /* The resume deletes it (sbx_gc() reaps an expired row so), as does
     * the handle's destroy. */
    cr_assert_eq(count("DELETE", re), 1);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    cr_assert_eq(count("DELETE", re), 2);
    free(re);
    free(want);
    free(state);
    free(live);
    free(file);
    free(root);
    free(id);
}

/* A snapshot is persist's tar of /workspace, kept as ID.tar (mode 0600) in
 * the client's snapshot directory (tests/hosted.sh points
 * SBX_CLOUDFLARE_SNAPSHOT_DIR into its run directory); a create with it
 * hydrates /workspace. What changed outside /workspace since the create
 * (a file in /tmp, a new directory tree under /root with its mode) comes
 * with it, through /workspace/.sbx-root.tar, which neither sandbox keeps.
 * An id that is not there is not_found, and the sandbox made for it is
 * deleted. */
Test(cloudflare, a_snapshot_is_the_workspace_kept_on_the_client_side)
{
    g_sb = create_plain();
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/workspace/keep.txt", "kept\n", 5, &err), 0);
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/tmp/also.txt", "also\n", 5, &err), 0);
    sbx_result *res = tu_sh(g_sb, "mkdir -p /root/made/deep && printf 'deep\\n' "
                                  ">/root/made/deep/f && chmod 0710 /root/made/deep", 0);
    tu_assert_exit(res, 0);
    sbx_result_free(res);
    char *snap = sbx_sandbox_snapshot(g_sb, &err);
    cr_assert_not_null(snap, "snapshot: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(strlen(snap), 7 + 32);
    cr_assert_eq(strncmp(snap, "cfsnap-", 7), 0);
    char *file = tu_strdup_printf("%s/%s.tar", getenv("SBX_CLOUDFLARE_SNAPSHOT_DIR"), snap);
    struct stat st;
    cr_assert_eq(stat(file, &st), 0, "%s: %s", file, strerror(errno));
    cr_assert_eq(st.st_mode & 0777, 0600);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_snapshot_id(o, snap, NULL), 0);
    sbx_sandbox *sb2 = tu_create(g_client, o);
    sbx_options_free(o);
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file(sb2, "/workspace/keep.txt", &data, &len, &err), 0,
                 "read_file: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(len, 5);
    cr_assert_eq(memcmp(data, "kept\n", 5), 0);
    free(data);
    cr_assert_eq(sbx_sandbox_read_file(sb2, "/tmp/also.txt", &data, &len, &err), 0,
                 "read_file: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(len, 5);
    cr_assert_eq(memcmp(data, "also\n", 5), 0);
    free(data);
    res = tu_sh(sb2, "stat -c %a /root/made/deep; cat /root/made/deep/f; ls -A /workspace; "
                     "ls /tmp", 0);
    tu_assert_stdout(res, "710\ndeep\nkeep.txt\nalso.txt\n");
    tu_assert_stderr(res, "");
    tu_assert_exit(res, 0);
    sbx_result_free(res);
    res = tu_sh(g_sb, "ls -A /workspace", 0);
    tu_assert_stdout(res, "keep.txt\n");
    tu_assert_exit(res, 0);
    sbx_result_free(res);
    cr_assert_eq(sbx_sandbox_destroy(sb2, NULL), 0);
    sbx_sandbox_free(sb2);
    unlink(file);
    free(file);

    /* The file removed, the id is gone. */
    tu_fake_reset();
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_snapshot_id(o, snap, NULL), 0);
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND);
    char *msg = tu_strdup_printf("cloudflare snapshot %s is not in %s", snap,
                                 getenv("SBX_CLOUDFLARE_SNAPSHOT_DIR"));
    cr_assert_str_eq(sbx_error_get0_message(err), msg);
    free(msg);
    sbx_error_free(err);
    cr_assert_eq(count("POST", "/v1/sandbox"), 1);
    cr_assert_eq(count("DELETE", "/v1/sandbox/[a-z2-7]{26}"), 1);
    free(snap);
}

/* The bridge's tunnels of sandbox @id, as the fake keeps them ("8080,9000"). */
static char *fake_tunnels(const char *id)
{
    char *path = tu_strdup_printf("/_fake/sandbox/%s", id);
    char *out = tu_fake_ints(path, NULL, "tunnels");
    free(path);
    return out;
}

/* Exposed ports are the bridge's tunnels: create opens one per port,
 * expose opens one, unexpose closes it; each port resolves to its tunnel's
 * https URL, kept across a resume; a port without a tunnel is not_found. */
Test(cloudflare, exposed_ports_are_the_bridges_tunnels)
{
    static const uint16_t ports[] = { 8080 };
    g_sb = tu_create_with_ports(g_client, ports, 1);
    const char *id = sbx_sandbox_get0_id(g_sb);
    char *t = fake_tunnels(id);
    cr_assert_str_eq(t, "8080");
    free(t);
    sbx_error *err = NULL;
    char *url = sbx_sandbox_resolve_port(g_sb, 8080, &err);
    cr_assert_not_null(url, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert(strncmp(url, "https://", 8) == 0 && strlen(url) == 8 + 12 + 18
              && strcmp(url + 20, ".trycloudflare.com") == 0, "url %s", url);

    cr_assert_eq(sbx_sandbox_expose_port(g_sb, 3000, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    t = fake_tunnels(id);
    cr_assert_str_eq(t, "3000,8080");
    free(t);
    char *state = sbx_sandbox_session_state(g_sb, &err);
    cr_assert_not_null(state);
    sbx_sandbox *again = sbx_sandbox_resume(g_client, state, &err);
    cr_assert_not_null(again, "%s", err ? sbx_error_get0_message(err) : "");
    tu_assert_port_url(again, 8080, url);
    tu_assert_ports(again, "3000,8080");
    sbx_sandbox_free(again);
    free(state);

    cr_assert_eq(sbx_sandbox_unexpose_port(g_sb, 8080, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    t = fake_tunnels(id);
    cr_assert_str_eq(t, "3000");
    free(t);
    tu_assert_port_not_exposed(g_sb, "cloudflare", 8080);
    free(url);
}

/* The Sandbox Bridge has no list call (its lifecycle routes are create,
 * persist, hydrate, mount, unmount, delete, the health check and the warm
 * pool's counts): the plugin declares no list_owned, and both calls are
 * feature_not_supported without a request to the bridge. */
Test(cloudflare, no_list_call_so_no_list_owned_declared_or_offered)
{
    uint64_t caps = 0;
    cr_assert_eq(sbx_client_probe(g_client, &caps, NULL), 0);
    cr_assert_eq(caps & SBX_CAP_LIST_OWNED, 0);
    sbx_backend_info **list = NULL;
    size_t n = 0;
    cr_assert_eq(sbx_backends_list(&list, &n, NULL), 0);
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(sbx_backend_info_get0_name(list[i]), "cloudflare") != 0)
            continue;
        seen = 1;
        cr_assert_eq(sbx_backend_info_get_caps(list[i]) & SBX_CAP_LIST_OWNED, 0);
        cr_assert(strstr(sbx_backend_info_get0_description(list[i]), "no list_owned"));
    }
    sbx_backend_info_list_free(list, n);
    cr_assert(seen, "cloudflare is not among the backends");
    tu_fake_reset();
    sbx_error *err = NULL;
    cr_assert_eq(sbx_client_list_owned(g_client, NULL, NULL, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_FEATURE_NOT_SUPPORTED);
    cr_assert_str_eq(sbx_error_get0_backend(err), "cloudflare");
    cr_assert_str_eq(sbx_error_get0_op(err), "list_owned");
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(sbx_client_destroy_by_id(g_client, "abcdefghijklmnopqrstuvwxyz", &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_FEATURE_NOT_SUPPORTED);
    cr_assert_str_eq(sbx_error_get0_op(err), "destroy_by_id");
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 0, "the bridge was asked");
    json_object_put(log);
}
