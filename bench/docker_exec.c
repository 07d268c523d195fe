/*
 * bench/docker_exec: exec of `true` in a live docker sandbox through libsbx
 * against
 *   raw : the same Engine calls made by hand with libcurl (exec create,
 *         start with the stream read to its end, inspect), one reused handle;
 *   cli : `docker exec CONTAINER true` (the CLI pays its own start-up).
 * The three alternate in one run (the CLI every fourth round), so all see the
 * same machine load.
 *
 * Output: p50 / p99 in milliseconds of each, and the ratios library/raw and
 * cli/library at p50. Targets (issue "Docker backend"): library/raw <= 1.10,
 * cli/library >= 1.4.
 *
 * Usage: docker_exec [-n ITERATIONS]   (default 200)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "docker_common.h"

extern char **environ;

static int run_cli(const char *cid)
{
    char *argv[] = { "docker", "exec", (char *)cid, "true", NULL };
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int r = posix_spawnp(&pid, "docker", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (r != 0)
        return -1;
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(int argc, char **argv)
{
    int n = 200, opt;
    while ((opt = getopt(argc, argv, "n:")) != -1) {
        if (opt == 'n')
            n = atoi(optarg);
        else {
            fprintf(stderr, "usage: docker_exec [-n ITERATIONS]\n");
            return 2;
        }
    }
    if (n < 4)
        n = 4;
    setenv("SBX_DOCKER_IMAGE", bench_image(), 0);
    sbx_error *err = NULL;
    sbx_options *o = sbx_options_new();
    sbx_options_set_allow_internet(o, 0, NULL);
    sbx_sandbox *sb = sbx_create("docker", o, &err);
    sbx_options_free(o);
    if (!sb) {
        fprintf(stderr, "docker_exec: create: %s\n", sbx_error_get0_message(err));
        return 1;
    }
    const char *cid = sbx_sandbox_get0_id(sb);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *h = curl_easy_init();
    double *lib = calloc((size_t)n, sizeof *lib), *raw = calloc((size_t)n, sizeof *raw);
    double *cli = calloc((size_t)n, sizeof *cli);
    size_t ncli = 0;
    const char *targv[] = { "true", NULL };
    int rc = 0;
    /* Warm up both paths (connections, page cache). */
    for (int i = 0; i < 3; i++) {
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.argv = targv;
        sbx_result_free(sbx_sandbox_execute_command(sb, &req, NULL));
        raw_exec(h, cid, "[\"true\"]");
    }
    for (int i = 0; i < n && rc == 0; i++) {
        double t0 = now_us();
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.argv = targv;
        sbx_result *r = sbx_sandbox_execute_command(sb, &req, &err);
        double t1 = now_us();
        if (!r || sbx_result_get_exit_code(r) != 0) {
            fprintf(stderr, "docker_exec: library exec failed: %s\n",
                    err ? sbx_error_get0_message(err) : "exit code");
            rc = 1;
        }
        sbx_result_free(r);
        int code = raw_exec(h, cid, "[\"true\"]");
        double t2 = now_us();
        if (code != 0) {
            fprintf(stderr, "docker_exec: raw exec failed (%d)\n", code);
            rc = 1;
        }
        lib[i] = (t1 - t0) / 1000.0;
        raw[i] = (t2 - t1) / 1000.0;
        if (i % 4 == 0) {
            double t3 = now_us();
            if (run_cli(cid) != 0) {
                fprintf(stderr, "docker_exec: `docker exec` failed (is the CLI on PATH?)\n");
                rc = 1;
            }
            cli[ncli++] = (now_us() - t3) / 1000.0;
        }
    }
    if (rc == 0) {
        double lp50 = percentile(lib, (size_t)n, 0.5), lp99 = percentile(lib, (size_t)n, 0.99);
        double rp50 = percentile(raw, (size_t)n, 0.5), rp99 = percentile(raw, (size_t)n, 0.99);
        double cp50 = percentile(cli, ncli, 0.5), cp99 = percentile(cli, ncli, 0.99);
        printf("exec true, %d iterations (docker exec: %zu)\n", n, ncli);
        printf("  library      p50 %7.2f ms  p99 %7.2f ms\n", lp50, lp99);
        printf("  raw libcurl  p50 %7.2f ms  p99 %7.2f ms\n", rp50, rp99);
        printf("  docker exec  p50 %7.2f ms  p99 %7.2f ms\n", cp50, cp99);
        printf("  library/raw at p50: %.3f (target <= 1.10)\n", lp50 / rp50);
        printf("  docker exec/library at p50: %.2f (target >= 1.4)\n", cp50 / lp50);
    }
    curl_easy_cleanup(h);
    sbx_sandbox_destroy(sb, NULL);
    sbx_sandbox_free(sb);
    free(lib);
    free(raw);
    free(cli);
    return rc;
}
