/*
 * test_session.c — the session surface on the backend under test
 * ($SBX_TEST_BACKEND: local, bubblewrap, docker):
 *
 * - exposed ports: a port added at create resolves to an endpoint on
 *   127.0.0.1 and a server in the sandbox answers there (local,
 *   bubblewrap); on docker the Engine publishes it on 127.0.0.1 only (its
 *   listener is on 127.0.0.1:N, none on 0.0.0.0) and the endpoint is that
 *   host port; a port never exposed is not_found; list, expose, unexpose,
 *   resume; bad ports; bubblewrap without the host's network refuses.
 * - users: exec as a user the backend can or cannot run as; a create-time
 *   user (docker: the container's user; bubblewrap: its uid and gid inside,
 *   by number or by name; local: refused); list/read/write_file_as and
 *   their async forms (owners of what a write as uid 1000 made, the
 *   user's permissions, refusals naming the user); CASE-45, step 7 as a
 *   non-root user of this host (uid 1001).
 * - workspace: persist and hydrate.
 *
 * Docker: the suite makes a bridge network of its own (the test Engine
 * has no default bridge) and removes it at the end.
 *
 * Runs from the build directory with the variables of `make check`.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include <sbx/sbx.h>

#include "testutil.h"

static char *g_tmp;
static sbx_client *g_client;
static char g_network[64];      /* docker: the suite's bridge network */

static int is_docker(void)
{
    return strcmp(tu_backend(), "docker") == 0;
}

static int is_bubblewrap(void)
{
    return strcmp(tu_backend(), "bubblewrap") == 0;
}

static void setup(void)
{
    sbx_error *err = NULL;
    g_tmp = tu_fresh_tmpdir();
    if (is_docker()) {
        snprintf(g_network, sizeof(g_network), "sbx-test-session-%d", (int)getpid());
        char *cmd = tu_strdup_printf("docker network create --driver bridge --label "
                                     "sbx.backend=docker %s >/dev/null", g_network);
        cr_assert_eq(system(cmd), 0, "%s failed", cmd);
        free(cmd);
        char *cfg = tu_strdup_printf("{\"network_mode\":\"%s\"}", g_network);
        g_client = sbx_client_new_with_config(tu_backend(), SBX_PLUGIN_MODE_DEFAULT, cfg, &err);
        free(cfg);
    } else {
        g_client = sbx_client_new(tu_backend(), &err);
    }
    cr_assert_null(err, "client of %s: %s", tu_backend(), err ? sbx_error_get0_message(err) : "");
}

static void teardown(void)
{
    sbx_client_free(g_client);
    g_client = NULL;
    if (g_network[0]) {
        /* A failed test may leave its container attached: removed first. */
        char *cmd = tu_strdup_printf("docker ps -aq --filter network=%s | xargs -r docker rm -f "
                                     ">/dev/null; docker network rm %s >/dev/null", g_network,
                                     g_network);
        cr_expect_eq(system(cmd), 0, "%s failed", cmd);
        free(cmd);
        g_network[0] = '\0';
    }
    tu_rmtree(g_tmp);
    free(g_tmp);
    g_tmp = NULL;
}

TestSuite(ports, .init = setup, .fini = teardown, .timeout = 120);

/* ------------------------------------------------------------- helpers */

static sbx_sandbox *create_with_ports(const unsigned *ports, size_t n)
{
    sbx_options *o = sbx_options_new();
    sbx_error *err = NULL;
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(sbx_options_add_port(o, ports[i], &err), 0, "add_port %u: %s", ports[i],
                     err ? sbx_error_get0_message(err) : "");
    }
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    return sb;
}

static char *resolve(sbx_sandbox *sb, unsigned port)
{
    sbx_error *err = NULL;
    char *s = sbx_sandbox_resolve_port(sb, port, &err);
    cr_assert_null(err, "resolve_port %u: %s", port, err ? sbx_error_get0_message(err) : "");
    cr_assert_not_null(s);
    return s;
}

/* Connects to "127.0.0.1:PORT" @endpoint, retrying for up to 10 s while
 * nothing listens yet, and returns what the peer sent until it closed. */
static char *fetch(const char *endpoint)
{
    unsigned port = 0;
    cr_assert_eq(sscanf(endpoint, "127.0.0.1:%u", &port), 1, "endpoint %s", endpoint);
    double end = tu_now() + 10;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
            char buf[256];
            size_t got = 0;
            ssize_t n;
            while ((n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
                got += (size_t)n;
            close(fd);
            buf[got] = '\0';
            return strdup(buf);
        }
        int e = errno;
        close(fd);
        cr_assert(e == ECONNREFUSED && tu_now() < end, "connect to %s: %s", endpoint,
                  strerror(e));
        poll(NULL, 0, 50);
    }
}

/* Starts, in the background in @sb, a server on 127.0.0.1:@port that
 * sends @text to its first client and ends. */
static void serve_once(sbx_sandbox *sb, unsigned port, const char *text)
{
    char *script = tu_strdup_printf(
        "nohup python3 -c 'import socket,sys\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind((\"127.0.0.1\", %u)); s.listen(1)\n"
        "c,_=s.accept(); c.sendall(sys.argv[1].encode()); c.close()' '%s' "
        ">/dev/null 2>&1 &", port, text);
    sbx_result *r = tu_sh(sb, script, 30);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    free(script);
}

static void destroy(sbx_sandbox *sb)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(sb);
}

/* Listeners on TCP port @port in /proc/net/tcp and tcp6: how many bind
 * 127.0.0.1 (*@loopback) and how many any other address (*@other). */
static void listeners(unsigned port, int *loopback, int *other)
{
    *loopback = *other = 0;
    const char *files[] = { "/proc/net/tcp", "/proc/net/tcp6" };
    for (size_t f = 0; f < 2; f++) {
        FILE *fp = fopen(files[f], "r");
        char line[512];
        if (!fp)
            continue;
        while (fgets(line, sizeof(line), fp)) {
            char addr[64];
            unsigned p, st;
            if (sscanf(line, " %*d: %63[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x", addr, &p, &st) != 3
                || p != port || st != 0x0A)
                continue;
            if (strcmp(addr, "0100007F") == 0)
                (*loopback)++;
            else
                (*other)++;
        }
        fclose(fp);
    }
}

/* -------------------------------------------------------------- tests */

Test(ports, an_exposed_port_resolves_to_loopback_and_reaches_the_sandbox)
{
    unsigned p = tu_free_port();
    unsigned ports[] = { p };
    sbx_sandbox *sb = create_with_ports(ports, 1);
    char *ep = resolve(sb, p);
    if (is_docker()) {
        /* The Engine's listener for the published port: 127.0.0.1 only. */
        unsigned hp = 0;
        cr_assert_eq(sscanf(ep, "127.0.0.1:%u", &hp), 1, "endpoint %s", ep);
        char *want = tu_strdup_printf("127.0.0.1:%u", hp);
        cr_assert_str_eq(ep, want);
        free(want);
        int lo = 0, other = 0;
        listeners(hp, &lo, &other);
        cr_assert_eq(lo, 1, "listeners on 127.0.0.1:%u: %d", hp, lo);
        cr_assert_eq(other, 0, "listeners of port %u on other addresses: %d", hp, other);
    } else {
        char *want = tu_strdup_printf("127.0.0.1:%u", p);
        cr_assert_str_eq(ep, want);
        free(want);
        serve_once(sb, p, "hello from the sandbox\n");
        char *got = fetch(ep);
        cr_assert_str_eq(got, "hello from the sandbox\n");
        free(got);
    }
    free(ep);
    destroy(sb);
}

Test(ports, a_port_never_exposed_is_not_found)
{
    unsigned p = tu_free_port();
    unsigned ports[] = { p };
    sbx_sandbox *sb = create_with_ports(ports, 1);
    unsigned q = p == 65535 ? p - 1 : p + 1;
    sbx_error *err = NULL;
    char *s = sbx_sandbox_resolve_port(sb, q, &err);
    cr_assert_null(s);
    char *msg = tu_strdup_printf("port %u ", q);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, msg, "is not exposed", NULL);
    free(msg);
    char num[16];
    snprintf(num, sizeof(num), "%u", q);
    cr_assert_str_eq(sbx_error_get0_context(err, "port"), num);
    cr_assert_str_eq(sbx_error_get0_op(err), "resolve_port");
    cr_assert_str_eq(sbx_error_get0_backend(err), tu_backend());
    sbx_error_free(err);
    err = NULL;
    /* A sandbox made without ports has none either. */
    sbx_sandbox *plain = create_with_ports(NULL, 0);
    cr_assert_null(sbx_sandbox_resolve_port(plain, p, &err));
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "is not exposed", NULL);
    sbx_error_free(err);
    uint16_t *list = NULL;
    size_t n = 7;
    err = NULL;
    cr_assert_eq(sbx_sandbox_list_ports(plain, &list, &n, &err), 0);
    cr_assert_eq(n, 0);
    cr_assert_null(list);
    destroy(plain);
    destroy(sb);
}

Test(ports, list_gives_the_exposed_ports_ascending)
{
    unsigned a = tu_free_port(), b = tu_free_port();
    if (a == b)
        b = a == 65535 ? a - 1 : a + 1;
    unsigned hi = a > b ? a : b, lo = a > b ? b : a;
    unsigned ports[] = { hi, lo, hi };
    sbx_sandbox *sb = create_with_ports(ports, 3);
    uint16_t *list = NULL;
    size_t n = 0;
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_list_ports(sb, &list, &n, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(n, 2);
    cr_assert_eq(list[0], lo);
    cr_assert_eq(list[1], hi);
    free(list);
    destroy(sb);
}

Test(ports, bad_port_numbers_are_invalid_argument)
{
    sbx_options *o = sbx_options_new();
    sbx_error *err = NULL;
    cr_assert_eq(sbx_options_add_port(o, 0, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "port 0 is not a TCP port number", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "port"), "0");
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(sbx_options_add_port(o, 65536, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "port 65536 is not a TCP port number",
                    NULL);
    sbx_error_free(err);
    sbx_options_free(o);
    sbx_sandbox *sb = create_with_ports(NULL, 0);
    err = NULL;
    cr_assert_null(sbx_sandbox_resolve_port(sb, 70000, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "port 70000 is not a TCP port number",
                    NULL);
    sbx_error_free(err);
    destroy(sb);
}

Test(ports, expose_and_unexpose_change_the_mapping_and_resume_sees_it)
{
    unsigned p = tu_free_port();
    sbx_sandbox *sb = create_with_ports(NULL, 0);
    sbx_error *err = NULL;
    if (is_docker()) {
        /* The Engine fixes published ports at create. */
        cr_assert_eq(sbx_sandbox_expose_port(sb, p, &err), -1);
        tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED,
                        "backend \"docker\" fixes its exposed ports at create", NULL);
        sbx_error_free(err);
        err = NULL;
        cr_assert_eq(sbx_sandbox_unexpose_port(sb, p, &err), -1);
        tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "fixes its exposed ports", NULL);
        sbx_error_free(err);
        destroy(sb);
        return;
    }
    cr_assert_eq(sbx_sandbox_expose_port(sb, p, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_expose_port(sb, p, &err), 0);
    char *ep = resolve(sb, p);
    char *want = tu_strdup_printf("127.0.0.1:%u", p);
    cr_assert_str_eq(ep, want);
    free(ep);

    /* Another handle, from the session state, sees the same ports. */
    char *state = sbx_sandbox_session_state(sb, &err);
    cr_assert_not_null(state, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *again = sbx_sandbox_resume(g_client, state, &err);
    cr_assert_not_null(again, "%s", err ? sbx_error_get0_message(err) : "");
    ep = resolve(again, p);
    cr_assert_str_eq(ep, want);
    free(ep);

    cr_assert_eq(sbx_sandbox_unexpose_port(again, p, &err), 0);
    cr_assert_eq(sbx_sandbox_unexpose_port(again, p, &err), 0);
    cr_assert_null(sbx_sandbox_resolve_port(again, p, &err));
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "is not exposed", NULL);
    sbx_error_free(err);
    err = NULL;
    sbx_sandbox_free(again);
    /* A third handle resumed after the unexpose sees it gone. */
    sbx_sandbox *third = sbx_sandbox_resume(g_client, state, &err);
    cr_assert_not_null(third);
    cr_assert_null(sbx_sandbox_resolve_port(third, p, &err));
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "is not exposed", NULL);
    sbx_error_free(err);
    sbx_sandbox_free(third);
    free(state);
    free(want);
    destroy(sb);
}

Test(ports, a_sandbox_without_the_hosts_network_refuses_ports)
{
    if (!is_bubblewrap() && !is_docker()) {
        /* local shares the host's network and refuses allow_internet=0. */
        sbx_options *o = sbx_options_new();
        sbx_error *err = NULL;
        cr_assert_eq(sbx_options_add_port(o, 8080, NULL), 0);
        cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
        cr_assert_null(sbx_sandbox_create(g_client, o, &err));
        tu_assert_error(err, SBX_ERROR_CONFIGURATION, "allow_internet=false", NULL);
        sbx_error_free(err);
        sbx_options_free(o);
        return;
    }
    unsigned p = tu_free_port();
    sbx_options *o = sbx_options_new();
    sbx_error *err = NULL;
    cr_assert_eq(sbx_options_add_port(o, p, NULL), 0);
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    char num[16];
    snprintf(num, sizeof(num), "%u", p);
    if (is_docker())
        tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED,
                        "a container with allow_internet=0 has no network", num, NULL);
    else
        tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED,
                        "network namespace of its own that this host cannot reach", num, NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "port"), num);
    sbx_error_free(err);
    sbx_options_free(o);
    if (is_bubblewrap()) {
        /* Nor can one be exposed later. */
        o = sbx_options_new();
        cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
        sbx_sandbox *sb = tu_create(g_client, o);
        sbx_options_free(o);
        err = NULL;
        cr_assert_eq(sbx_sandbox_expose_port(sb, p, &err), -1);
        tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "network namespace of its own",
                        NULL);
        cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "own_network_namespace");
        sbx_error_free(err);
        destroy(sb);
    }
}

Test(ports, bindings_stay_on_loopback)
{
    sbx_error *err = NULL;
    uint64_t caps = 0;
    cr_assert_eq(sbx_client_probe(g_client, &caps, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert(caps & SBX_CAP_EXPOSED_PORTS, "%s lacks exposed_ports", tu_backend());
    if (!is_docker())
        return;     /* local and bubblewrap: the host's own network, nothing published */
    /* docker: backend_options cannot publish beyond 127.0.0.1. */
    const char *cases[] = {
        "{\"HostConfig\":{\"PortBindings\":{\"80/tcp\":[{\"HostIp\":\"0.0.0.0\","
        "\"HostPort\":\"\"}]}}}",
        "{\"HostConfig\":{\"PortBindings\":{\"80/tcp\":[{\"HostPort\":\"8081\"}]}}}",
    };
    const char *ips[] = { "\"0.0.0.0\"", "\"\"" };
    for (size_t i = 0; i < 2; i++) {
        sbx_options *o = sbx_options_new();
        cr_assert_eq(sbx_options_set_backend_options(o, cases[i], NULL), 0);
        cr_assert_null(sbx_sandbox_create(g_client, o, &err));
        tu_assert_error(err, SBX_ERROR_CONFIGURATION, "port 80/tcp would be published on",
                        ips[i], "published on 127.0.0.1 only", NULL);
        cr_assert_str_eq(sbx_error_get0_context(err, "option"), "backend_options");
        sbx_error_free(err);
        err = NULL;
        sbx_options_free(o);
    }
}

/* ------------------------------------------------------------- users */

TestSuite(users, .init = setup, .fini = teardown, .timeout = 120);

/* Runs @script as @user in @sb: the result (asserts the call worked). */
static sbx_result *sh_as(sbx_sandbox *sb, const char *user, const char *script)
{
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.shell = script;
    rq.user = user;
    rq.timeout_secs = 30;
    return tu_exec(sb, &rq);
}

/* The uid @sb's commands run as (`id -u` in it). */
static unsigned sandbox_uid(sbx_sandbox *sb)
{
    sbx_result *r = tu_sh(sb, "id -u", 30);
    tu_assert_exit(r, 0);
    size_t len = 0;
    const char *out = sbx_result_get0_stdout(r, &len);
    unsigned uid = (unsigned)strtoul(out, NULL, 10);
    sbx_result_free(r);
    return uid;
}

Test(users, a_user_the_backend_can_run_as_is_honoured_with_its_home)
{
    sbx_sandbox *sb = create_with_ports(NULL, 0);
    if (is_docker()) {
        sbx_result *r = sh_as(sb, "nobody", "id -un; id -u; echo \"$HOME\"");
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, "nobody\n65534\n/nonexistent\n");
        sbx_result_free(r);
        r = sh_as(sb, "0", "id -un; echo \"$HOME\"; touch \"$HOME/w\" && echo writable");
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, "root\n/root\nwritable\n");
        sbx_result_free(r);
    } else {
        /* local and bubblewrap: the uid their commands run as (bubblewrap
         * started as root runs them as nobody), by number or by name. */
        unsigned own = sandbox_uid(sb);
        char want[64];
        snprintf(want, sizeof(want), "%u\n", own);
        char *num = tu_strdup_printf("%u", own);
        sbx_result *r = sh_as(sb, num, "id -u");
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, want);
        sbx_result_free(r);
        free(num);
        struct passwd *pw = getpwuid(own);
        cr_assert_not_null(pw, "uid %u has no name", own);
        r = sh_as(sb, pw->pw_name, "id -u");
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, want);
        sbx_result_free(r);
    }
    destroy(sb);
}

Test(users, a_user_the_backend_cannot_run_as_is_refused_and_nothing_runs)
{
    sbx_sandbox *sb = create_with_ports(NULL, 0);
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    sbx_error *err = NULL;
    const char *other = is_docker() ? NULL : sandbox_uid(sb) == 0 ? "nobody" : "root";
    if (is_docker())
        other = "sbx-no-such-user";
    rq.shell = "touch \"$SANDBOX_ROOT/tmp/ran\"";
    rq.user = other;
    rq.timeout_secs = 30;
    sbx_result *r = sbx_sandbox_execute_command(sb, &rq, &err);
    if (is_docker()) {
        /* The Engine refuses a user the container's passwd lacks. */
        cr_assert_null(r);
        tu_assert_error(err, SBX_ERROR_EXECUTION_FAILED, "sbx-no-such-user", NULL);
    } else {
        cr_assert_null(r);
        char *msg = tu_strdup_printf("backend runs every command as uid %u", sandbox_uid(sb));
        tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, msg, "cannot be chosen", other,
                        NULL);
        free(msg);
        cr_assert_str_eq(sbx_error_get0_context(err, "user"), other);
        cr_assert_str_eq(sbx_error_get0_backend(err), tu_backend());
    }
    sbx_error_free(err);
    r = tu_sh(sb, "test -e \"$SANDBOX_ROOT/tmp/ran\" && echo ran || echo not-run", 30);
    tu_assert_stdout(r, "not-run\n");
    sbx_result_free(r);
    destroy(sb);
}

Test(users, a_malformed_user_is_invalid_argument)
{
    sbx_sandbox *sb = create_with_ports(NULL, 0);
    const char *bad[] = { "", "a b", "x\ny" };
    for (size_t i = 0; i < 3; i++) {
        sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
        sbx_error *err = NULL;
        rq.shell = "true";
        rq.user = bad[i];
        cr_assert_null(sbx_sandbox_execute_command(sb, &rq, &err));
        tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "is not a user name or uid", NULL);
        cr_assert_str_eq(sbx_error_get0_context(err, "user"), bad[i]);
        sbx_error_free(err);
    }
    destroy(sb);
}

/* The image whose USER is app (uid 1000, gid 1000, home /home/app), built
 * once on the test image (docker). */
static const char *case45_image(void)
{
    const char *base = getenv("SBX_DOCKER_IMAGE");
    char *cmd = tu_strdup_printf(
        "printf 'FROM %s\\nRUN useradd -m -u 1000 -U app\\nUSER app\\n"
        "LABEL sbx.backend=docker\\n' | docker build -q --network none -t "
        "sbx-test/case45:latest - >/dev/null 2>&1", base ? base : "sbx-test/debian:bookworm");
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
    free(cmd);
    return "sbx-test/case45:latest";
}

/* A new sandbox of g_client whose default user is @user (on @image when
 * not NULL); asserts the create worked. */
static sbx_sandbox *create_as(const char *user, const char *image)
{
    sbx_options *o = sbx_options_new();
    sbx_error *err = NULL;
    cr_assert_eq(sbx_options_set_user(o, user, &err), 0);
    if (image)
        cr_assert_eq(sbx_options_set_image(o, image, NULL), 0);
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    return sb;
}

/* The output of @script in @sb (asserts exit 0), malloc()ed. */
static char *sh_out(sbx_sandbox *sb, const char *script)
{
    sbx_result *r = tu_sh(sb, script, 30);
    tu_assert_exit(r, 0);
    size_t len = 0;
    const char *out = sbx_result_get0_stdout(r, &len);
    char *copy = strndup(out, len);
    sbx_result_free(r);
    return copy;
}

/* The uid:gid the sandbox's passwd gives @uid on bubblewrap without an
 * image (the host's), "UID:UID" when it has no entry. */
static char *host_ids(unsigned uid)
{
    struct passwd *pw = getpwuid(uid);
    return tu_strdup_printf("%u:%u", uid, pw ? (unsigned)pw->pw_gid : uid);
}

/* docker: the create-time user replaces the image's USER for commands and
 * file calls; the _as calls act as the user they name (a file written as
 * uid 1000 and the parents it made belong to 1000:1000), with that user's
 * permissions; a user the container lacks is refused naming it. */
Test(users, a_create_time_user_and_the_file_calls_as_a_user)
{
    if (!is_docker()) {
        sbx_options *o = sbx_options_new();
        sbx_error *err = NULL;
        if (is_bubblewrap()) {
            /* bubblewrap takes a user (the next test), not a group. */
            cr_assert_eq(sbx_options_set_user(o, "1000:1000", NULL), 0);
            cr_assert_null(sbx_sandbox_create(g_client, o, &err));
            sbx_options_free(o);
            tu_assert_error(err, SBX_ERROR_CONFIGURATION,
                            "bubblewrap backend: user \"1000:1000\" is neither a user name nor "
                            "a uid", NULL);
            cr_assert_str_eq(sbx_error_get0_context(err, "user"), "1000:1000");
        } else {
            /* local refuses the option before anything is made. */
            cr_assert_eq(sbx_options_set_user(o, "1000", &err), 0);
            cr_assert_null(sbx_sandbox_create(g_client, o, &err));
            sbx_options_free(o);
            tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED,
                            "backend \"local\" cannot run its sandboxes as a chosen user (user "
                            "\"1000\" asked)", NULL);
            cr_assert_str_eq(sbx_error_get0_context(err, "user"), "1000");
            cr_assert_str_eq(sbx_error_get0_op(err), "create");
        }
        sbx_error_free(err);
        return;
    }
    sbx_sandbox *sb = create_as("0", case45_image());
    char *out = sh_out(sb, "id -u; id -g; echo \"$HOME\"");
    cr_assert_str_eq(out, "0\n0\n/root\n");
    free(out);
    sbx_error *err = NULL;
    /* The plain file calls follow the default user: root's. */
    cr_assert_eq(sbx_sandbox_write_file(sb, "/home/app/plain.txt", "p\n", 2, &err), 0);
    /* As uid 1000 (app): the file and the parents the call made. */
    cr_assert_eq(sbx_sandbox_write_file_as(sb, "/home/app/as/deep/x.txt", "1000", "x\n", 2, &err),
                 0, "%s", err ? sbx_error_get0_message(err) : "");
    out = sh_out(sb, "cd /home/app && stat -c '%u:%g %a %n' plain.txt as as/deep as/deep/x.txt");
    cr_assert_str_eq(out, "0:0 644 plain.txt\n1000:1000 755 as\n1000:1000 755 as/deep\n"
                          "1000:1000 644 as/deep/x.txt\n");
    free(out);
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file_as(sb, "/home/app/as/deep/x.txt", "app", &data, &len,
                                          &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    tu_assert_bytes("x.txt", data, len, "x\n", 2);
    free(data);
    sbx_file_info **list = NULL;
    size_t n = 0;
    cr_assert_eq(sbx_sandbox_list_files_as(sb, "/home/app/as", "app", &list, &n, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(n, 1);
    cr_assert_str_eq(sbx_file_info_get0_name(list[0]), "deep");
    cr_assert_str_eq(sbx_file_info_get0_path(list[0]), "/home/app/as/deep");
    cr_assert(sbx_file_info_is_dir(list[0]));
    cr_assert_eq(sbx_file_info_get_mode(list[0]), 0755);
    sbx_file_info_list_free(list, n);
    /* app's permissions: root's 0600 file cannot be read, root's
     * directory cannot be written, and nothing is made. */
    out = sh_out(sb, "printf s > /tmp/secret && chmod 600 /tmp/secret && echo ok");
    free(out);
    cr_assert_eq(sbx_sandbox_read_file_as(sb, "/tmp/secret", "app", &data, &len, &err), -1);
    cr_assert_null(data);
    tu_assert_error(err, SBX_ERROR_EXECUTION_FAILED,
                    "cat failed in the sandbox for \"/tmp/secret\" (exit code 1): cat: "
                    "/tmp/secret: Permission denied", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), "/tmp/secret");
    cr_assert_str_eq(sbx_error_get0_op(err), "read_file");
    sbx_error_clear(&err);
    cr_assert_eq(sbx_sandbox_write_file_as(sb, "/root/no/x.txt", "app", "n", 1, &err), -1);
    tu_assert_error(err, SBX_ERROR_EXECUTION_FAILED, "/root/no/x.txt", "Permission denied",
                    NULL);
    cr_assert_str_eq(sbx_error_get0_op(err), "write_file");
    sbx_error_clear(&err);
    out = sh_out(sb, "test -e /root/no && echo made || echo not-made");
    cr_assert_str_eq(out, "not-made\n");
    free(out);
    /* A user the container lacks: the Engine's refusal, naming it. */
    cr_assert_eq(sbx_sandbox_write_file_as(sb, "/tmp/u.txt", "sbx-no-such-user", "u", 1, &err),
                 -1);
    tu_assert_error(err, SBX_ERROR_EXECUTION_FAILED, "sbx-no-such-user", NULL);
    cr_assert_str_eq(sbx_error_get0_op(err), "write_file");
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), "/tmp/u.txt");
    sbx_error_clear(&err);
    out = sh_out(sb, "test -e /tmp/u.txt && echo made || echo not-made");
    cr_assert_str_eq(out, "not-made\n");
    free(out);
    destroy(sb);

    /* A user the image's passwd lacks fails the create, naming it. */
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_user(o, "sbx-no-such-user", NULL), 0);
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    tu_assert_error(err, SBX_ERROR_CREATION_FAILED, "sbx-no-such-user", NULL);
    sbx_error_free(err);
}

/* bubblewrap: the create-time user is the sandbox's one uid and gid
 * inside (bwrap --uid/--gid): by number and by the name the sandbox's
 * passwd has; commands and what the file calls write are that user's;
 * exec and the _as calls take that user only; a resumed handle knows it;
 * a name the passwd lacks fails the create naming it. local: the _as
 * calls take the user its commands run as, and refuse any other. */
Test(users, the_create_time_user_is_the_sandboxs_and_the_as_calls_take_it)
{
    sbx_error *err = NULL;
    if (!is_bubblewrap()) {
        if (is_docker()) {
            /* The container keeps its User: a resumed handle runs as it. */
            sbx_sandbox *sb = create_as("0", case45_image());
            char *state = sbx_sandbox_session_state(sb, &err);
            cr_assert_not_null(state);
            sbx_sandbox *again = sbx_resume(state, &err);
            cr_assert_not_null(again, "%s", err ? sbx_error_get0_message(err) : "");
            char *out = sh_out(again, "id -un; id -u");
            cr_assert_str_eq(out, "root\n0\n");
            free(out);
            sbx_sandbox_free(again);
            free(state);
            destroy(sb);
            return;
        }
        sbx_sandbox *sb = create_with_ports(NULL, 0);
        char *own = tu_strdup_printf("%u", sandbox_uid(sb));
        char *path = strdup("/as/x.txt");
        cr_assert_eq(sbx_sandbox_write_file_as(sb, path, own, "x\n", 2, &err), 0, "%s",
                     err ? sbx_error_get0_message(err) : "");
        char *data = NULL;
        size_t len = 0;
        cr_assert_eq(sbx_sandbox_read_file_as(sb, path, own, &data, &len, &err), 0);
        tu_assert_bytes("x.txt", data, len, "x\n", 2);
        free(data);
        const char *other = sandbox_uid(sb) == 0 ? "nobody" : "root";
        char *p2 = strdup("/other/y.txt");
        cr_assert_eq(sbx_sandbox_write_file_as(sb, p2, other, "y", 1, &err), -1);
        tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "cannot be chosen", other, NULL);
        cr_assert_str_eq(sbx_error_get0_context(err, "user"), other);
        cr_assert_str_eq(sbx_error_get0_context(err, "path"), p2);
        cr_assert_str_eq(sbx_error_get0_op(err), "write_file");
        sbx_error_clear(&err);
        sbx_file_info **list = NULL;
        size_t n = 0;
        cr_assert_eq(sbx_sandbox_list_files_as(sb, "/as", other, &list, &n, &err), -1);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_FEATURE_NOT_SUPPORTED);
        cr_assert_str_eq(sbx_error_get0_op(err), "list_files");
        sbx_error_clear(&err);
        cr_assert_eq(sbx_sandbox_list_files_as(sb, "/as", own, &list, &n, &err), 0);
        cr_assert_eq(n, 1);
        cr_assert_str_eq(sbx_file_info_get0_name(list[0]), "x.txt");
        cr_assert_eq(sbx_file_info_get_size(list[0]), 2);
        sbx_file_info_list_free(list, n);
        char *made = sh_out(sb, "test -e \"$SANDBOX_ROOT/other\" && echo made || echo not-made");
        cr_assert_str_eq(made, "not-made\n");
        free(made);
        free(p2);
        free(path);
        free(own);
        destroy(sb);
        return;
    }
    sbx_sandbox *sb = create_as("1000", NULL);
    char *ids = host_ids(1000);
    char *want = tu_strdup_printf("1000\n%s\n", strchr(ids, ':') + 1);
    char *out = sh_out(sb, "id -u; id -g");
    cr_assert_str_eq(out, want);
    free(out);
    /* HOME stays the sandbox's root, which is that user's to write. */
    out = sh_out(sb, "echo \"$HOME\"; touch \"$HOME/h\" && stat -c %u /h");
    cr_assert_str_eq(out, "/\n1000\n");
    free(out);
    cr_assert_eq(sbx_sandbox_write_file(sb, "/work/w/w.txt", "w\n", 2, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_write_file_as(sb, "/work/a/a.txt", "1000", "a\n", 2, &err), 0,
                 "%s", err ? sbx_error_get0_message(err) : "");
    out = sh_out(sb, "cd /work && stat -c '%u:%g %n' w w/w.txt a a/a.txt");
    char *st = tu_strdup_printf("%s w\n%s w/w.txt\n%s a\n%s a/a.txt\n", ids, ids, ids, ids);
    cr_assert_str_eq(out, st);
    free(st);
    free(out);
    /* The sandbox's user by number; root is not it. */
    sbx_result *r = sh_as(sb, "1000", "id -u");
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "1000\n");
    sbx_result_free(r);
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.shell = "touch /tmp/ran";
    rq.user = "0";
    cr_assert_null(sbx_sandbox_execute_command(sb, &rq, &err));
    tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED,
                    "bubblewrap backend runs every command as uid 1000 (the sandbox's user); "
                    "user \"0\" cannot be chosen", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_sandbox_write_file_as(sb, "/tmp/r.txt", "0", "r", 1, &err), -1);
    tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "user \"0\" cannot be chosen", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "user"), "0");
    sbx_error_clear(&err);
    out = sh_out(sb, "test -e /tmp/ran || test -e /tmp/r.txt || echo none");
    cr_assert_str_eq(out, "none\n");
    free(out);
    /* Resumed: the same user inside, and exec still takes it. */
    char *state = sbx_sandbox_session_state(sb, &err);
    cr_assert_not_null(state);
    sbx_sandbox *again = sbx_resume(state, &err);
    cr_assert_not_null(again, "%s", err ? sbx_error_get0_message(err) : "");
    r = sh_as(again, "1000", "id -u");
    tu_assert_stdout(r, "1000\n");
    sbx_result_free(r);
    sbx_sandbox_free(again);
    free(state);
    destroy(sb);
    free(want);
    free(ids);

    /* By name, as the sandbox's passwd (here the host's) has it. */
    sb = create_as("nobody", NULL);
    out = sh_out(sb, "id -u; id -g; id -un");
    cr_assert_str_eq(out, "65534\n65534\nnobody\n");
    free(out);
    r = sh_as(sb, "nobody", "id -u");
    tu_assert_stdout(r, "65534\n");
    sbx_result_free(r);
    destroy(sb);

    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_user(o, "sbx-no-such-user", NULL), 0);
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION,
                    "bubblewrap backend: user \"sbx-no-such-user\" is not in the sandbox's "
                    "/etc/passwd (/etc/passwd)", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "user"), "sbx-no-such-user");
    sbx_error_free(err);
}

/* ---------------------------------------------------------- workspace */

TestSuite(workspace, .init = setup, .fini = teardown, .timeout = 180);

static int g_ws_seq;

/* A sandbox of @client (NULL: the suite's) whose workdir is a fresh
 * workspace: on local a new host directory (its root), elsewhere /work/ws. */
static sbx_sandbox *create_ws(sbx_client *client, int local)
{
    sbx_options *o = sbx_options_new();
    char *wd = local ? tu_strdup_printf("%s/ws-%d", g_tmp, ++g_ws_seq) : strdup("/work/ws");
    cr_assert_eq(sbx_options_set_workdir(o, wd, NULL), 0);
    sbx_sandbox *sb = tu_create(client ? client : g_client, o);
    sbx_options_free(o);
    free(wd);
    return sb;
}

/* The workdir of @sb as a sandbox path. */
static const char *ws_dir(int local)
{
    return local ? "/" : "/work/ws";
}

/* Every entry under the sandbox directory @dir: type, name, mode and
 * content digest or link target, one a line, sorted. New string. */
static char *listing(sbx_sandbox *sb, const char *dir)
{
    char *script = tu_strdup_printf(
        "cd \"$SANDBOX_ROOT%s\" && find . -mindepth 1 | LC_ALL=C sort | "
        "while IFS= read -r f; do\n"
        "  if [ -L \"$f\" ]; then echo \"L $f -> $(readlink \"$f\")\"\n"
        "  elif [ -d \"$f\" ]; then echo \"D $f $(stat -c %%a \"$f\")\"\n"
        "  else echo \"F $f $(stat -c %%a \"$f\") $(sha256sum < \"$f\" | cut -c1-64)\"; fi\n"
        "done", dir);
    sbx_result *r = tu_sh(sb, script, 60);
    tu_assert_exit(r, 0);
    size_t len = 0;
    const char *out = sbx_result_get0_stdout(r, &len);
    char *s = strndup(out, len);
    sbx_result_free(r);
    free(script);
    return s;
}

/* Fills the workspace of @sb: all byte values, an executable, an empty
 * directory, nesting, a name with spaces, an internal symlink. */
static void fill_ws(sbx_sandbox *sb, const char *dir)
{
    char *script = tu_strdup_printf(
        "set -e; cd \"$SANDBOX_ROOT%s\"\n"
        "mkdir -p src/deep empty 'with space'\n"
        "printf 'print(1)\\n' > src/main.py\n"
        "printf '#!/bin/sh\\necho run\\n' > src/run.sh; chmod 755 src/run.sh\n"
        "i=0; while [ $i -lt 256 ]; do printf \"\\\\$(printf %%o $i)\"; i=$((i+1)); done "
        "> src/deep/bytes.bin\n"
        "printf 'x' > 'with space/a b.txt'\n"
        "ln -s src/main.py link.py\n", dir);
    sbx_result *r = tu_sh(sb, script, 60);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    free(script);
}

/* A new temporary file's descriptor (unlinked), positioned at 0. */
static int temp_fd(void)
{
    char *path = tu_strdup_printf("%s/stream-XXXXXX", g_tmp);
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    free(path);
    return fd;
}

static int64_t persist(sbx_sandbox *sb, const char *dir, unsigned flags, int fd)
{
    sbx_error *err = NULL;
    int64_t n = sbx_sandbox_persist_workspace(sb, dir, flags, fd, &err);
    cr_assert_geq(n, 0, "persist: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
    return n;
}

static void hydrate(sbx_sandbox *sb, const char *dir, unsigned flags, int fd)
{
    sbx_error *err = NULL;
    int64_t n = sbx_sandbox_hydrate_workspace(sb, dir, flags, fd, &err);
    cr_assert_geq(n, 0, "hydrate: %s", err ? sbx_error_get0_message(err) : "");
}

/* The entry names of the tar stream in @fd (`tar -t`), one a line. */
static char *tar_names(int fd)
{
    char *cmd = tu_strdup_printf("tar -tf /proc/self/fd/%d 2>/dev/null", fd);
    cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, p);
    buf[n] = '\0';
    pclose(p);
    free(cmd);
    cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
    return strdup(buf);
}

Test(workspace, persist_then_hydrate_restores_the_tree_exactly)
{
    int local = !is_docker() && !is_bubblewrap();
    sbx_sandbox *sb = create_ws(NULL, local);
    const char *dir = ws_dir(local);
    fill_ws(sb, dir);
    char *before = listing(sb, dir);
    int fd = temp_fd();
    persist(sb, NULL, 0, fd);
    char *names = tar_names(fd);
    /* The layout: workspace/ and the tree under it, sorted. */
    const char *want_local =
        "workspace/\nworkspace/empty/\nworkspace/link.py\nworkspace/src/\n"
        "workspace/src/deep/\nworkspace/src/deep/bytes.bin\nworkspace/src/main.py\n"
        "workspace/src/run.sh\nworkspace/tmp/\nworkspace/with space/\n"
        "workspace/with space/a b.txt\n";
    const char *want =
        "workspace/\nworkspace/empty/\nworkspace/link.py\nworkspace/src/\n"
        "workspace/src/deep/\nworkspace/src/deep/bytes.bin\nworkspace/src/main.py\n"
        "workspace/src/run.sh\nworkspace/with space/\nworkspace/with space/a b.txt\n";
    cr_assert_str_eq(names, local ? want_local : want);
    free(names);

    sbx_result *r = tu_sh(sb, tu_strdup_printf("cd \"$SANDBOX_ROOT%s\" && rm -rf src && "
                                               "echo new > added.txt", dir), 30);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    hydrate(sb, NULL, 0, fd);
    char *after = listing(sb, dir);
    cr_assert_str_eq(after, before);
    r = tu_sh(sb, "./src/run.sh", 30);
    tu_assert_stdout(r, "run\n");
    sbx_result_free(r);
    free(before);
    free(after);
    close(fd);
    destroy(sb);
}

/* A tar stream made by python's tarfile from @spec (a Python expression
 * run with tarfile as t and the archive as a), in a new temporary file. */
static int crafted(const char *spec)
{
    char *path = tu_strdup_printf("%s/crafted-XXXXXX", g_tmp);
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    char *cmd = tu_strdup_printf(
        "python3 -c 'import tarfile as t, io\n"
        "def f(a, name, data=b\"x\", **kw):\n"
        "    i = t.TarInfo(name); i.size = len(data)\n"
        "    for k, v in kw.items(): setattr(i, k, v)\n"
        "    a.addfile(i, io.BytesIO(data) if i.isreg() else None)\n"
        "def d(a, name):\n"
        "    i = t.TarInfo(name); i.type = t.DIRTYPE; i.mode = 0o755; a.addfile(i)\n"
        "a = t.open(\"%s\", \"w\", format=t.PAX_FORMAT)\n"
        "%s\n"
        "a.close()'", path, spec);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    free(cmd);
    fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    unlink(path);
    free(path);
    return fd;
}

Test(workspace, a_refused_stream_leaves_the_workspace_as_it_was)
{
    int local = !is_docker() && !is_bubblewrap();
    sbx_sandbox *sb = create_ws(NULL, local);
    const char *dir = ws_dir(local);
    fill_ws(sb, dir);
    char *before = listing(sb, dir);
    static const struct {
        const char *spec;
        const char *message;
        const char *entry;
    } cases[] = {
        { NULL, "not a tar stream", NULL },
        { "d(a, \"workspace\"); f(a, \"workspace/../escape.txt\")", "..",
          "workspace/../escape.txt" },
        { "d(a, \"workspace\"); f(a, \"/workspace/abs.txt\")", "absolute", "/workspace/abs.txt" },
        { "d(a, \"workspace\"); f(a, \"workspace/evil\", b\"\", type=t.SYMTYPE, "
          "linkname=\"/etc\")", "evil", "workspace/evil" },
        { "d(a, \"workspace\"); f(a, \"workspace/ok.txt\"); f(a, \"other/x.txt\")",
          "is not part of a persisted workspace", "other" },
        { "f(a, \"notes.txt\")", "is not part of a persisted workspace", "notes.txt" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int fd;
        if (cases[i].spec) {
            fd = crafted(cases[i].spec);
        } else {
            fd = temp_fd();
            cr_assert_eq(write(fd, "this is not a tar stream\n", 25), 25);
            cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
        }
        sbx_error *err = NULL;
        cr_assert_eq(sbx_sandbox_hydrate_workspace(sb, NULL, 0, fd, &err), -1, "case %zu", i);
        tu_assert_error(err, SBX_ERROR_WORKSPACE, cases[i].message, NULL);
        if (cases[i].entry)
            cr_assert_str_eq(sbx_error_get0_context(err, "entry"), cases[i].entry,
                             "case %zu", i);
        sbx_error_free(err);
        close(fd);
        char *after = listing(sb, dir);
        cr_assert_str_eq(after, before, "case %zu changed the workspace", i);
        free(after);
    }
    free(before);
    destroy(sb);
}

Test(workspace, agent_home_state_travels_only_when_asked)
{
    int local = !is_docker() && !is_bubblewrap();
    sbx_sandbox *sb = create_ws(NULL, local);
    sbx_result *r = tu_sh(sb, "set -e; mkdir -p \"$HOME/.claude\" \"$HOME/.codex\"\n"
                              "printf '{\"model\":\"x\"}' > \"$HOME/.claude/settings.json\"\n"
                              "printf '{\"userID\":\"u\"}' > \"$HOME/.claude.json\"\n"
                              "printf 'model = \"y\"\\n' > \"$HOME/.codex/config.toml\"", 30);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    int fd = temp_fd();
    persist(sb, NULL, 0, fd);
    char *names = tar_names(fd);
    cr_assert_null(strstr(names, "home/"), "agent state without the flag: %s", names);
    free(names);
    close(fd);

    fd = temp_fd();
    persist(sb, NULL, SBX_PERSIST_AGENT_HOME, fd);
    names = tar_names(fd);
    cr_assert_not_null(strstr(names, "\nhome/.claude/settings.json\n"), "%s", names);
    cr_assert_not_null(strstr(names, "\nhome/.claude.json\n"), "%s", names);
    cr_assert_not_null(strstr(names, "\nhome/.codex/config.toml\n"), "%s", names);
    free(names);
    destroy(sb);

    /* A fresh sandbox gets it back, in its own user's home. */
    sbx_sandbox *sb2 = create_ws(NULL, local);
    hydrate(sb2, NULL, SBX_PERSIST_AGENT_HOME, fd);
    r = tu_sh(sb2, "cat \"$HOME/.claude/settings.json\" \"$HOME/.claude.json\" "
                   "\"$HOME/.codex/config.toml\"", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "{\"model\":\"x\"}{\"userID\":\"u\"}model = \"y\"\n");
    sbx_result_free(r);
    close(fd);
    destroy(sb2);
}

Test(workspace, a_workspace_moves_between_backends)
{
    /* local <-> the backend under test (local <-> local on local). */
    int local = !is_docker() && !is_bubblewrap();
    sbx_error *err = NULL;
    sbx_client *lc = sbx_client_new("local", &err);
    cr_assert_not_null(lc, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *from = create_ws(lc, 1);
    fill_ws(from, "/");
    /* local's workdir is its root: its tmp/ moves too; made alike here. */
    char *want = listing(from, "/");
    int fd = temp_fd();
    persist(from, NULL, 0, fd);
    sbx_sandbox *to = create_ws(NULL, local);
    hydrate(to, NULL, 0, fd);
    char *got = listing(to, ws_dir(local));
    cr_assert_str_eq(got, want);
    free(got);
    close(fd);

    /* And back: persisted on the backend under test, hydrated on local. */
    sbx_result *r = tu_sh(to, tu_strdup_printf("echo back > \"$SANDBOX_ROOT%s/back.txt\"",
                                               ws_dir(local)), 30);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    char *want2 = listing(to, ws_dir(local));
    fd = temp_fd();
    persist(to, NULL, 0, fd);
    sbx_sandbox *again = create_ws(lc, 1);
    hydrate(again, NULL, 0, fd);
    got = listing(again, "/");
    cr_assert_str_eq(got, want2);
    free(got);
    close(fd);
    free(want);
    free(want2);
    destroy(again);
    destroy(to);
    destroy(from);
    sbx_client_free(lc);
}

/* CASE-45: what the file calls write belongs to the user commands run as
 * (docker: an image whose USER is app, uid 1000, gid 1000, home
 * /home/app; bubblewrap: the create-time user 1000; local: the uid it
 * runs every command as; both in a directory /work/app made by a command),
 * and the home's own owner and mode stay as they were. */
Test(users, case45_written_and_uploaded_files_belong_to_the_exec_user)
{
    sbx_sandbox *sb;
    const char *home;
    if (is_docker()) {
        const char *base = getenv("SBX_DOCKER_IMAGE");
        char *cmd = tu_strdup_printf(
            "printf 'FROM %s\\nRUN useradd -m -u 1000 -U app\\nUSER app\\n"
            "LABEL sbx.backend=docker\\n' | docker build -q --network none -t "
            "sbx-test/case45:latest - >/dev/null 2>&1", base ? base : "sbx-test/debian:bookworm");
        cr_assert_eq(system(cmd), 0, "%s failed", cmd);
        free(cmd);
        sbx_options *o = sbx_options_new();
        cr_assert_eq(sbx_options_set_image(o, "sbx-test/case45:latest", NULL), 0);
        sb = tu_create(g_client, o);
        sbx_options_free(o);
        home = "/home/app";
    } else {
        /* bubblewrap: as the case's create(..., user="app"), uid 1000. */
        sb = is_bubblewrap() ? create_as("1000", NULL) : create_with_ports(NULL, 0);
        sbx_result *r = tu_sh(sb, "mkdir -p \"$SANDBOX_ROOT/work/app\"", 30);
        tu_assert_exit(r, 0);
        sbx_result_free(r);
        home = "/work/app";
    }
    /* The host tree, owned by a uid the sandbox does not have. */
    char *p = tu_strdup_printf("%s/P", g_tmp);
    char *path = tu_strdup_printf("%s/proj/sub", p);
    char *cmd = tu_strdup_printf("mkdir -p '%s' && printf 'u\\n' > '%s/u.txt' && "
                                 "printf 'a\\n' > '%s/proj/a.txt' && printf 'b\\n' > "
                                 "'%s/proj/sub/b.txt'", path, p, p, p);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
    free(path);
    if (geteuid() == 0) {
        cmd = tu_strdup_printf("chown -R 4242:4242 '%s'", p);
        cr_assert_eq(system(cmd), 0);
        free(cmd);
    }
    char *mode_cmd = tu_strdup_printf("stat -c '%%u:%%g %%a' \"$SANDBOX_ROOT%s\"", home);
    sbx_result *r = tu_sh(sb, mode_cmd, 30);
    tu_assert_exit(r, 0);
    size_t len = 0;
    const char *hb = sbx_result_get0_stdout(r, &len);
    char *home_before = strndup(hb, len);
    sbx_result_free(r);

    sbx_error *err = NULL;
    char *w = tu_strdup_printf("%s/w.txt", home);
    cr_assert_eq(sbx_sandbox_write_file(sb, w, "w\n", 2, &err), 0, "1: %s",
                 err ? sbx_error_get0_message(err) : "");
    char *lu = tu_strdup_printf("%s/u.txt", p), *su = tu_strdup_printf("%s/u.txt", home);
    cr_assert_eq(sbx_sandbox_upload_file(sb, lu, su, &err), 0, "2: %s",
                 err ? sbx_error_get0_message(err) : "");
    char *lp = tu_strdup_printf("%s/proj", p), *sp = tu_strdup_printf("%s/proj", home);
    cr_assert_geq(sbx_sandbox_upload_dir(sb, lp, sp, &err), 0, "3: %s",
                  err ? sbx_error_get0_message(err) : "");
    char *deep = tu_strdup_printf("%s/newdir/deep/x.txt", home);
    cr_assert_eq(sbx_sandbox_write_file(sb, deep, "x\n", 2, &err), 0, "4: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_geq(sbx_sandbox_upload_dir(sb, lp, home, &err), 0, "5: %s",
                  err ? sbx_error_get0_message(err) : "");

    r = tu_sh(sb, mode_cmd, 30);
    tu_assert_stdout(r, home_before);
    sbx_result_free(r);

    unsigned uid = sandbox_uid(sb);
    r = tu_sh(sb, "id -g", 30);
    unsigned gid = (unsigned)strtoul(sbx_result_get0_stdout(r, &len), NULL, 10);
    sbx_result_free(r);
    if (is_docker())
        cr_assert(uid == 1000 && gid == 1000, "exec user %u:%u", uid, gid);
    if (is_bubblewrap()) {
        char *ids = host_ids(1000), *got = tu_strdup_printf("%u:%u", uid, gid);
        cr_assert_str_eq(got, ids);
        free(ids);
        free(got);
    }
    char *step6 = tu_strdup_printf(
        "id -u; cd \"$SANDBOX_ROOT%s\" && stat -c '%%u:%%g %%n' w.txt u.txt proj proj/a.txt "
        "proj/sub proj/sub/b.txt newdir newdir/deep newdir/deep/x.txt .; echo more >> u.txt "
        "&& echo append-ok; touch proj/sub/new && echo create-ok; rm newdir/deep/x.txt && "
        "echo rm-ok", home);
    r = tu_sh(sb, step6, 30);
    char *want = tu_strdup_printf(
        "%u\n%u:%u w.txt\n%u:%u u.txt\n%u:%u proj\n%u:%u proj/a.txt\n%u:%u proj/sub\n"
        "%u:%u proj/sub/b.txt\n%u:%u newdir\n%u:%u newdir/deep\n%u:%u newdir/deep/x.txt\n"
        "%u:%u .\nappend-ok\ncreate-ok\nrm-ok\n", uid, uid, gid, uid, gid, uid, gid, uid, gid,
        uid, gid, uid, gid, uid, gid, uid, gid, uid, gid, uid, gid);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, want);
    sbx_result_free(r);
    free(want);
    free(step6);
    free(home_before);
    free(mode_cmd);
    free(w);
    free(lu);
    free(su);
    free(lp);
    free(sp);
    free(deep);
    free(p);
    destroy(sb);
}

/* CASE-45 step 7, as a non-root user of this host (uid and gid 1001; in
 * the docker group on docker, as a user of the Engine is): a tree made in
 * the sandbox and downloaded lands owned by that user, with no ownership
 * error. Returns NULL, or a message saying what differed (malloc()ed). */
#define CASE45_UID 1001u

static char *step7_check_entry(const char *q, const char *rel, const char *content)
{
    unsigned uid = (unsigned)geteuid(), gid = (unsigned)getegid();
    char *path = tu_strdup_printf("%s%s%s", q, rel[0] ? "/" : "", rel), *msg = NULL;
    struct stat st;
    if (lstat(path, &st) != 0) {
        msg = tu_strdup_printf("%s: %s", path, strerror(errno));
    } else if (st.st_uid != uid || st.st_gid != gid) {
        msg = tu_strdup_printf("%s belongs to %u:%u, not %u:%u", path, (unsigned)st.st_uid,
                               (unsigned)st.st_gid, uid, gid);
    } else if (content) {
        char buf[64] = { 0 };
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        if (n != strlen(content) || memcmp(buf, content, n) != 0)
            msg = tu_strdup_printf("%s holds \"%s\", not \"%s\"", path, buf, content);
    }
    free(path);
    return msg;
}

static char *sbx_failed(const char *what, sbx_error *err)
{
    char *msg = tu_strdup_printf("%s: %s", what, err ? sbx_error_get0_message(err) : "?");
    sbx_error_free(err);
    return msg;
}

static char *step7_as_user(const char *dir, const char *cfg, const char *image)
{
    sbx_error *err = NULL;
    char *state = tu_strdup_printf("%s/state", dir), *tmp = tu_strdup_printf("%s/tmp", dir);
    char *msg = NULL;
    setenv("SBX_STATE_DIR", state, 1);
    setenv("TMPDIR", tmp, 1);
    setenv("HOME", dir, 1);
    free(state);
    free(tmp);
    sbx_client *c = sbx_client_new_with_config(tu_backend(), SBX_PLUGIN_MODE_DEFAULT, cfg, &err);
    if (!c)
        return sbx_failed("client", err);
    sbx_options *o = sbx_options_new();
    if (image)
        sbx_options_set_image(o, image, NULL);
    sbx_sandbox *sb = sbx_sandbox_create(c, o, &err);
    sbx_options_free(o);
    if (!sb) {
        sbx_client_free(c);
        return sbx_failed("create", err);
    }
    /* The sandbox's tree: made by its own user, as step 3 leaves it. */
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.shell = "h=\"$SANDBOX_ROOT${SBX_CASE45_HOME:-/home/app}\" && mkdir -p \"$h/proj/sub\" && "
               "printf 'a\\n' > \"$h/proj/a.txt\" && printf 'b\\n' > \"$h/proj/sub/b.txt\"";
    const char *env[] = { image ? "SBX_CASE45_HOME=/home/app" : "SBX_CASE45_HOME=/work/app",
                          NULL };
    rq.env = env;
    rq.timeout_secs = 60;
    sbx_result *r = sbx_sandbox_execute_command(sb, &rq, &err);
    if (!r || sbx_result_get_exit_code(r) != 0) {
        msg = r ? tu_strdup_printf("making the tree exited %d", sbx_result_get_exit_code(r))
                : sbx_failed("exec", err);
        sbx_result_free(r);
        goto out;
    }
    sbx_result_free(r);
    char *q = tu_strdup_printf("%s/Q", dir);
    int64_t n = sbx_sandbox_download_dir(sb, image ? "/home/app/proj" : "/work/app/proj", q,
                                         &err);
    if (n != 3) {
        msg = n < 0 ? sbx_failed("download_dir", err)
                    : tu_strdup_printf("download_dir copied %lld entries, not 3", (long long)n);
    } else {
        static const char *const rel[] = { "", "a.txt", "sub", "sub/b.txt" };
        static const char *const content[] = { NULL, "a\n", NULL, "b\n" };
        for (size_t i = 0; i < 4 && !msg; i++)
            msg = step7_check_entry(q, rel[i], content[i]);
    }
    free(q);
out:
    if (sbx_sandbox_destroy(sb, &err) < 0 && !msg)
        msg = sbx_failed("destroy", err);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    return msg;
}

Test(users, case45_step7_a_non_root_user_downloads_a_tree_as_its_own)
{
    const char *image = NULL;
    char *cfg = NULL;
    if (is_docker()) {
        const char *base = getenv("SBX_DOCKER_IMAGE");
        char *cmd = tu_strdup_printf(
            "printf 'FROM %s\\nRUN useradd -m -u 1000 -U app\\nUSER app\\n"
            "LABEL sbx.backend=docker\\n' | docker build -q --network none -t "
            "sbx-test/case45:latest - >/dev/null 2>&1", base ? base : "sbx-test/debian:bookworm");
        cr_assert_eq(system(cmd), 0, "%s failed", cmd);
        free(cmd);
        image = "sbx-test/case45:latest";
        cfg = tu_strdup_printf("{\"network_mode\":\"%s\"}", g_network);
    }
    char *dir = tu_strdup_printf("%s/u%u", g_tmp, CASE45_UID);
    if (geteuid() != 0) {
        /* Already a non-root user: that one. */
        char *sub = tu_strdup_printf("mkdir -p '%s/state' '%s/tmp'", dir, dir);
        cr_assert_eq(system(sub), 0);
        free(sub);
        char *msg = step7_as_user(dir, cfg, image);
        cr_assert_null(msg, "as uid %u: %s", (unsigned)geteuid(), msg);
        free(dir);
        free(cfg);
        return;
    }
    char *cmd = tu_strdup_printf("mkdir -p '%s/state' '%s/tmp' && chmod 0700 '%s' && "
                                 "chown -R %u:%u '%s'", dir, dir, dir, CASE45_UID, CASE45_UID,
                                 dir);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
    free(cmd);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        struct group *docker = is_docker() ? getgrnam("docker") : NULL;
        gid_t groups[1] = { docker ? docker->gr_gid : CASE45_UID };
        char *msg = NULL;
        if (setgroups(1, groups) != 0 || setresgid(CASE45_UID, CASE45_UID, CASE45_UID) != 0 ||
            setresuid(CASE45_UID, CASE45_UID, CASE45_UID) != 0)
            msg = tu_strdup_printf("cannot become uid %u: %s", CASE45_UID, strerror(errno));
        else
            msg = step7_as_user(dir, cfg, image);
        if (msg && write(fds[1], msg, strlen(msg)) < 0)
            _exit(2);
        _exit(msg ? 1 : 0);
    }
    close(fds[1]);
    char buf[4096] = { 0 };
    size_t got = 0;
    ssize_t n;
    while (got < sizeof(buf) - 1 && (n = read(fds[0], buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)n;
    close(fds[0]);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "as uid %u: %s (status 0x%x)",
              CASE45_UID, buf, (unsigned)status);
    free(dir);
    free(cfg);
}

/* ------------------------------------------------------------- async */

typedef struct async_seen {
    int done;
    int64_t value;
    char *data;
    sbx_error *error;
    sbx_op_kind kind;
} async_seen;

static void async_done(sbx_op *op, void *user_data)
{
    async_seen *s = user_data;
    s->done = 1;
    s->kind = sbx_op_get_kind(op);
    s->value = sbx_op_get_int64(op);
    s->error = sbx_op_steal_error(op);
    size_t len = 0;
    s->data = s->error ? NULL : sbx_op_steal_data(op, &len);
}

static void async_wait_for(sbx_async *a, async_seen *s)
{
    double end = tu_now() + 120;
    while (!s->done) {
        cr_assert(tu_now() < end, "the operation did not complete");
        sbx_async_wait(a, 1.0);
    }
}

Test(workspace, the_async_forms_run_persist_hydrate_and_resolve_port)
{
    int local = !is_docker() && !is_bubblewrap();
    unsigned p = tu_free_port();
    sbx_options *o = sbx_options_new();
    char *wd = local ? tu_strdup_printf("%s/ws-async", g_tmp) : strdup("/work/ws");
    cr_assert_eq(sbx_options_set_workdir(o, wd, NULL), 0);
    cr_assert_eq(sbx_options_add_port(o, p, NULL), 0);
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    free(wd);
    fill_ws(sb, ws_dir(local));
    char *before = listing(sb, ws_dir(local));
    sbx_error *err = NULL;
    sbx_async *a = sbx_async_new(2, &err);
    cr_assert_not_null(a);

    async_seen s = { 0 };
    cr_assert_not_null(sbx_sandbox_resolve_port_async(a, sb, p, async_done, &s, &err));
    async_wait_for(a, &s);
    cr_assert_null(s.error, "%s", s.error ? sbx_error_get0_message(s.error) : "");
    cr_assert_eq(s.kind, SBX_OP_RESOLVE_PORT);
    cr_assert_eq(s.value, (int64_t)p);
    char *direct = resolve(sb, p);
    cr_assert_str_eq(s.data, direct);
    free(direct);
    free(s.data);

    int fd = temp_fd();
    memset(&s, 0, sizeof(s));
    cr_assert_not_null(sbx_sandbox_persist_workspace_async(a, sb, NULL, 0, fd, async_done, &s,
                                                           &err));
    async_wait_for(a, &s);
    cr_assert_null(s.error, "%s", s.error ? sbx_error_get0_message(s.error) : "");
    cr_assert_eq(s.kind, SBX_OP_PERSIST_WORKSPACE);
    cr_assert_eq(s.value, local ? 11 : 10, "entries %lld", (long long)s.value);
    cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);

    sbx_result *r = tu_sh(sb, tu_strdup_printf("rm -rf \"$SANDBOX_ROOT%s/src\"", ws_dir(local)),
                          30);
    sbx_result_free(r);
    memset(&s, 0, sizeof(s));
    cr_assert_not_null(sbx_sandbox_hydrate_workspace_async(a, sb, NULL, 0, fd, async_done, &s,
                                                           &err));
    async_wait_for(a, &s);
    cr_assert_null(s.error, "%s", s.error ? sbx_error_get0_message(s.error) : "");
    cr_assert_eq(s.kind, SBX_OP_HYDRATE_WORKSPACE);
    char *after = listing(sb, ws_dir(local));
    cr_assert_str_eq(after, before);
    free(after);
    free(before);
    close(fd);
    sbx_async_free(a);
    destroy(sb);
}

/* The completion of a listing: its names and sizes, one a line, in data. */
static void list_done(sbx_op *op, void *user_data)
{
    async_seen *s = user_data;
    size_t n = 0;
    sbx_file_info **list = sbx_op_steal_file_list(op, &n);
    s->kind = sbx_op_get_kind(op);
    s->error = sbx_op_steal_error(op);
    s->data = strdup("");
    for (size_t i = 0; i < n; i++) {
        char *line = tu_strdup_printf("%s%s %lld\n", s->data, sbx_file_info_get0_name(list[i]),
                                      (long long)sbx_file_info_get_size(list[i]));
        free(s->data);
        s->data = line;
    }
    sbx_file_info_list_free(list, n);
    s->done = 1;
}

/* The file calls as a user have asynchronous forms: as the sandbox's own
 * user (the one every backend here runs commands as) a write, a read and a
 * listing; as a user it cannot run as, the refusal comes in the callback. */
Test(users, the_as_calls_have_async_forms)
{
    sbx_sandbox *sb = create_with_ports(NULL, 0);
    char *own = tu_strdup_printf("%u", sandbox_uid(sb));
    sbx_error *err = NULL;
    sbx_async *a = sbx_async_new(2, &err);
    cr_assert_not_null(a);
    async_seen s = { 0 };
    cr_assert_not_null(sbx_sandbox_write_file_as_async(a, sb, "/tmp/as/a.txt", own, "a\n", 2,
                                                       async_done, &s, &err));
    async_wait_for(a, &s);
    cr_assert_null(s.error, "%s", s.error ? sbx_error_get0_message(s.error) : "");
    cr_assert_eq(s.kind, SBX_OP_WRITE_FILE);
    memset(&s, 0, sizeof(s));
    cr_assert_not_null(sbx_sandbox_read_file_as_async(a, sb, "/tmp/as/a.txt", own, async_done,
                                                      &s, &err));
    async_wait_for(a, &s);
    cr_assert_null(s.error, "%s", s.error ? sbx_error_get0_message(s.error) : "");
    cr_assert_eq(s.kind, SBX_OP_READ_FILE);
    cr_assert_str_eq(s.data, "a\n");
    free(s.data);
    memset(&s, 0, sizeof(s));
    cr_assert_not_null(sbx_sandbox_list_files_as_async(a, sb, "/tmp/as", own, list_done, &s,
                                                       &err));
    async_wait_for(a, &s);
    cr_assert_null(s.error, "%s", s.error ? sbx_error_get0_message(s.error) : "");
    cr_assert_eq(s.kind, SBX_OP_LIST_FILES);
    cr_assert_str_eq(s.data, "a.txt 2\n");
    free(s.data);
    const char *other = is_docker() ? "sbx-no-such-user" : sandbox_uid(sb) == 0 ? "nobody"
                                                                                : "root";
    memset(&s, 0, sizeof(s));
    cr_assert_not_null(sbx_sandbox_write_file_as_async(a, sb, "/tmp/as/b.txt", other, "b", 1,
                                                       async_done, &s, &err));
    async_wait_for(a, &s);
    cr_assert_not_null(s.error);
    cr_assert_eq(sbx_error_get_code(s.error),
                 is_docker() ? SBX_ERROR_EXECUTION_FAILED : SBX_ERROR_FEATURE_NOT_SUPPORTED);
    cr_assert_str_eq(sbx_error_get0_op(s.error), "write_file");
    cr_assert(strstr(sbx_error_get0_message(s.error), other) != NULL, "%s",
              sbx_error_get0_message(s.error));
    sbx_error_free(s.error);
    sbx_async_free(a);
    free(own);
    destroy(sb);
}
