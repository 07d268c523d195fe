/*
 * ssh_exec — a warm exec on the runpod backend (one ssh process over the
 * pod's control master) against a plain `ssh host true` (a new connection
 * each time, key exchange and authentication included) to the same server,
 * interleaved in one run. The server is a pod of the RunPod contract fake
 * (tests/fakes/runpod.py, an OpenSSH server on 127.0.0.1), which the bench
 * starts with a throwaway key in a temporary directory and stops by its pid.
 *
 *   bench/ssh_exec [-n ITERATIONS]      (default 50)
 *
 * The build tree's plugins/runpod/.libs is put first on SBX_PLUGIN_PATH.
 *
 * Prints p50 and p90 in milliseconds of each side and the ratio warm/plain
 * (the master's gain: below 1). Also the libsbx exec against a bare mux
 * client (`ssh -S SOCKET host true` through the same master), whose ratio
 * is the library's own cost on top of one round trip.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <sbx/sbx.h>

#include "bench.h"

#define FAKE_KEY "sbx-bench-dummy-key"

extern char **environ;

static pid_t g_fake = -1;

static int fake_start(int *port)
{
    char script[4096];
    snprintf(script, sizeof script, "%s/tests/fakes/runpod.py", SBX_TOP_SRCDIR);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        dup2(p[1], 1);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        setenv("SBX_FAKE_API_KEY", FAKE_KEY, 1);
        execl("/usr/bin/python3", "python3", script, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    g_fake = pid;
    char line[64];
    size_t len = 0;
    double end = now_ms() + 10000;
    while (len < sizeof line - 1 && !memchr(line, '\n', len)) {
        struct pollfd pf = { p[0], POLLIN, 0 };
        int left = (int)(end - now_ms());
        if (left <= 0 || poll(&pf, 1, left) <= 0)
            break;
        ssize_t r = read(p[0], line + len, sizeof line - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(p[0]);
    line[len] = '\0';
    return sscanf(line, "PORT %d", port) == 1 ? 0 : -1;
}

/* The pod's ssh port, from the fake's control route. */
static int pod_port(int fport, const char *id)
{
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/_fake/pods/%s", fport, id);
    CURL *h = curl_easy_init();
    bench_body b = { 0 };
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, bench_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    int port = 0;
    if (curl_easy_perform(h) == CURLE_OK && b.data) {
        json_object *j = json_tokener_parse(b.data), *v = NULL;
        if (j && json_object_object_get_ex(j, "port", &v))
            port = json_object_get_int(v);
        json_object_put(j);
    }
    free(b.data);
    curl_easy_cleanup(h);
    return port;
}

/* Runs @argv, output to /dev/null; its exit status, or -1. */
static int run(char *const argv[])
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The control socket of the bench's one sandbox: the only sbx-ssh-*
 * directory's "c" under @dir. */
static int find_socket(const char *dir, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -d %s/sbx-ssh-*/c 2>/dev/null | head -1", dir);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    int ok = fgets(out, (int)cap, f) != NULL;
    pclose(f);
    if (!ok)
        return -1;
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

static void row(const char *name, double *a, double *b, int n, const char *an, const char *bn)
{
    double a50 = percentile(a, (size_t)n, 0.5), a90 = percentile(a, (size_t)n, 0.9);
    double b50 = percentile(b, (size_t)n, 0.5), b90 = percentile(b, (size_t)n, 0.9);
    printf("%-22s %s p50 %7.2f ms p90 %7.2f ms | %s p50 %7.2f ms p90 %7.2f ms | ratio p50 %.3f\n",
           name, an, a50, a90, bn, b50, b90, a50 / b50);
}

int main(int argc, char **argv)
{
    int n = 50;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            n = atoi(argv[++i]);
    if (n < 3)
        n = 3;
    char tmpl[] = "/tmp/sbx-bench-ssh-XXXXXX";
    char *dir = mkdtemp(tmpl);
    if (!dir) {
        perror("mkdtemp");
        return 1;
    }
    char key[256];
    snprintf(key, sizeof key, "%s/id_ed25519", dir);
    char *kg[] = { "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sbx-bench", "-f", key,
                   NULL };
    int fport = 0;
    if (run(kg) != 0 || fake_start(&fport) < 0) {
        printf("(left out: no ssh-keygen or the runpod fake did not start)\n");
        if (g_fake > 0) {
            kill(g_fake, SIGTERM);
            waitpid(g_fake, NULL, 0);
        }
        return 0;
    }
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", fport);
    setenv("RUNPOD_API_BASE_URL", url, 1);
    setenv("RUNPOD_API_KEY", FAKE_KEY, 1);
    setenv("SBX_RUNPOD_SSH_KEY", key, 1);
    setenv("SBX_RUNPOD_GPU", "NVIDIA GeForce RTX 4090", 1);
    setenv("SBX_PLUGIN_MODE", "inprocess", 1);
    /* The build tree's plugin first. */
    const char *pp = getenv("SBX_PLUGIN_PATH");
    char *path = NULL;
    if (asprintf(&path, "%s/plugins/runpod/.libs%s%s", SBX_TOP_BUILDDIR, pp && *pp ? ":" : "",
                 pp && *pp ? pp : "") > 0)
        setenv("SBX_PLUGIN_PATH", path, 1);
    free(path);
    setenv("TMPDIR", dir, 1);
    int status = 1;
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new("runpod", &err);
    sbx_options *o = sbx_options_new();
    sbx_options_set_backend_options(o, "{\"poll_interval_secs\": 0.05}", NULL);
    sbx_sandbox *sb = c ? sbx_sandbox_create(c, o, &err) : NULL;
    sbx_options_free(o);
    double *lib = calloc((size_t)n, sizeof(double)), *plain = calloc((size_t)n, sizeof(double));
    double *mux = calloc((size_t)n, sizeof(double)), *lib2 = calloc((size_t)n, sizeof(double));
    char sock[512] = "";
    if (!sb) {
        printf("create failed: %s\n", err ? sbx_error_get0_message(err) : "?");
        goto out;
    }
    int port = pod_port(fport, sbx_sandbox_get0_id(sb));
    if (port <= 0 || find_socket(dir, sock, sizeof sock) < 0) {
        printf("no pod port or control socket\n");
        goto out;
    }
    char portarg[16], kh[300];
    snprintf(portarg, sizeof portarg, "%d", port);
    snprintf(kh, sizeof kh, "UserKnownHostsFile=%s/bench_known_hosts", dir);
    char *plain_argv[] = { "ssh", "-F", "/dev/null", "-T", "-i", key, "-p", portarg, "-o",
                           "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o",
                           "StrictHostKeyChecking=accept-new", "-o", kh, "-o",
                           "ControlPath=none", "-l", "root", "127.0.0.1", "true", NULL };
    char sockopt[600];
    snprintf(sockopt, sizeof sockopt, "ControlPath=%s", sock);
    char *mux_argv[] = { "ssh", "-F", "/dev/null", "-T", "-o", sockopt, "-o", "ControlMaster=no",
                         "-p", portarg, "-l", "root", "127.0.0.1", "true", NULL };
    const char *const targv[] = { "true", NULL };
    /* Warm up both (the known host, the master). */
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.argv = targv;
    sbx_result *r = sbx_sandbox_execute_command(sb, &rq, &err);
    sbx_result_free(r);
    if (run(plain_argv) != 0 || run(mux_argv) != 0) {
        printf("plain ssh or the mux client failed\n");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        double t0 = now_ms();
        r = sbx_sandbox_execute_command(sb, &rq, &err);
        double t1 = now_ms();
        if (!r || sbx_result_get_exit_code(r) != 0) {
            printf("exec failed: %s\n", err ? sbx_error_get0_message(err) : "exit code");
            sbx_result_free(r);
            goto out;
        }
        sbx_result_free(r);
        lib[i] = lib2[i] = t1 - t0;
        t0 = now_ms();
        if (run(plain_argv) != 0) {
            printf("plain ssh failed\n");
            goto out;
        }
        plain[i] = now_ms() - t0;
        t0 = now_ms();
        if (run(mux_argv) != 0) {
            printf("mux client failed\n");
            goto out;
        }
        mux[i] = now_ms() - t0;
    }
    printf("ssh_exec: %d warm execs of `true` on runpod (fake pod, 127.0.0.1), in process\n", n);
    row("warm vs plain ssh", lib, plain, n, "libsbx", "ssh host true");
    row("warm vs bare mux", lib2, mux, n, "libsbx", "ssh -S sock true");
    status = 0;
out:
    if (sb) {
        sbx_sandbox_destroy(sb, NULL);
        sbx_sandbox_free(sb);
    }
    sbx_error_free(err);
    sbx_client_free(c);
    free(lib);
    free(lib2);
    free(plain);
    free(mux);
    kill(g_fake, SIGTERM);
    waitpid(g_fake, NULL, 0);
    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    if (system(rm) != 0)
        status = 1;
    return status;
}
