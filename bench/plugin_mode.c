/*
 * bench/plugin_mode: the cost of running a plugin out of process (in its
 * sbx-plugin-host, the default) against loading it into the application
 * (SBX_PLUGIN_MODE_IN_PROCESS), on the same backend, alternating the two in
 * one run so both see the same machine load.
 *
 *   exec       : execute_command({"/bin/true"}) on a live sandbox, per call
 *   upload_dir : sbx_sandbox_upload_dir() of a tree of 256 MiB (64 files of
 *                4 MiB in 8 directories), per call
 *
 * Output: per pair the p50 (and p99 for exec) of each mode and the ratio
 * out-of-process / in-process. Targets (issue "Out-of-process plugin host
 * and the asynchronous API"): <= 1.10 at p50 for both.
 *
 * Usage: plugin_mode [-n EXEC_ITERATIONS] [-u UPLOAD_ITERATIONS] [-b BACKEND]
 *        (defaults 400, 6, local). The tree is made under $TMPDIR (or /tmp)
 *        and removed at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "bench.h"

static void die(const char *what, sbx_error *err)
{
    fprintf(stderr, "plugin_mode: %s: %s\n", what, err ? sbx_error_get0_message(err) : "failed");
    exit(1);
}

/* Writes the 256 MiB tree under @dir. */
static void make_tree(const char *dir)
{
    if (strlen(dir) > 4000) {
        fprintf(stderr, "plugin_mode: path too long: %s\n", dir);
        exit(1);
    }
    static char block[1 << 20];
    for (size_t i = 0; i < sizeof block; i++)
        block[i] = (char)(i * 2654435761u >> 13);
    for (int d = 0; d < 8; d++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/d%d", dir, d);
        if (mkdir(path, 0755) < 0) {
            perror(path);
            exit(1);
        }
        for (int f = 0; f < 8; f++) {
            snprintf(path, sizeof path, "%s/d%d/f%d.bin", dir, d, f);
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd < 0) {
                perror(path);
                exit(1);
            }
            for (int k = 0; k < 4; k++) {
                block[0] = (char)(d * 8 + f + k);
                if (write(fd, block, sizeof block) != (ssize_t)sizeof block) {
                    perror(path);
                    exit(1);
                }
            }
            close(fd);
        }
    }
}

static void rm_tree(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "plugin_mode: could not remove %s\n", dir);
}

typedef struct side {
    const char *name;
    sbx_client *client;
    sbx_sandbox *sandbox;
    double *exec_us;
    double *upload_us;
} side;

static void side_open(side *s, const char *backend, sbx_plugin_mode mode, int n, int u)
{
    sbx_error *err = NULL;
    s->client = sbx_client_new_with_mode(backend, mode, &err);
    if (!s->client)
        die("client", err);
    s->sandbox = sbx_sandbox_create(s->client, NULL, &err);
    if (!s->sandbox)
        die("create", err);
    s->exec_us = calloc((size_t)n, sizeof(double));
    s->upload_us = calloc((size_t)u, sizeof(double));
}

static void side_close(side *s)
{
    sbx_error *err = NULL;
    if (sbx_sandbox_destroy(s->sandbox, &err) < 0)
        die("destroy", err);
    sbx_sandbox_free(s->sandbox);
    sbx_client_free(s->client);
    free(s->exec_us);
    free(s->upload_us);
}

static double one_exec(side *s)
{
    static const char *const argv[] = { "/bin/true", NULL };
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    sbx_error *err = NULL;
    rq.argv = argv;
    double t0 = now_us();
    sbx_result *r = sbx_sandbox_execute_command(s->sandbox, &rq, &err);
    double t = now_us() - t0;
    if (!r || sbx_result_get_exit_code(r) != 0)
        die("exec", err);
    sbx_result_free(r);
    return t;
}

static double one_upload(side *s, const char *tree, int i)
{
    sbx_error *err = NULL;
    char dest[64];
    snprintf(dest, sizeof dest, "/up%d", i);
    double t0 = now_us();
    int64_t n = sbx_sandbox_upload_dir(s->sandbox, tree, dest, &err);
    double t = now_us() - t0;
    if (n < 0)
        die("upload_dir", err);
    /* Keep the disk from filling: remove it again (not timed). */
    char script[96];
    snprintf(script, sizeof script, "rm -rf \"$SANDBOX_ROOT/up%d\"", i);
    sbx_result *r = sbx_sandbox_execute_shell(s->sandbox, script, &err);
    if (!r)
        die("rm", err);
    sbx_result_free(r);
    return t;
}

int main(int argc, char **argv)
{
    int n = 400, u = 6, opt;
    const char *backend = "local";
    while ((opt = getopt(argc, argv, "n:u:b:")) != -1) {
        switch (opt) {
        case 'n':
            n = atoi(optarg);
            break;
        case 'u':
            u = atoi(optarg);
            break;
        case 'b':
            backend = optarg;
            break;
        default:
            fprintf(stderr, "usage: plugin_mode [-n EXEC_ITERATIONS] [-u UPLOAD_ITERATIONS] "
                            "[-b BACKEND]\n");
            return 2;
        }
    }
    if (n < 10 || u < 1) {
        fprintf(stderr, "plugin_mode: need -n >= 10 and -u >= 1\n");
        return 2;
    }
    side oop = { .name = "outofprocess" }, inp = { .name = "inprocess" };
    side_open(&oop, backend, SBX_PLUGIN_MODE_OUT_OF_PROCESS, n, u);
    side_open(&inp, backend, SBX_PLUGIN_MODE_IN_PROCESS, n, u);

    /* Warm up both, then alternate. */
    for (int i = 0; i < 20; i++) {
        one_exec(&oop);
        one_exec(&inp);
    }
    for (int i = 0; i < n; i++) {
        if (i % 2) {
            oop.exec_us[i] = one_exec(&oop);
            inp.exec_us[i] = one_exec(&inp);
        } else {
            inp.exec_us[i] = one_exec(&inp);
            oop.exec_us[i] = one_exec(&oop);
        }
    }
    double o50 = percentile(oop.exec_us, (size_t)n, 0.5), o99 = percentile(oop.exec_us, (size_t)n, 0.99);
    double i50 = percentile(inp.exec_us, (size_t)n, 0.5), i99 = percentile(inp.exec_us, (size_t)n, 0.99);
    printf("exec /bin/true on %s, %d calls each:\n", backend, n);
    printf("  inprocess     p50 %8.0f us  p99 %8.0f us\n", i50, i99);
    printf("  outofprocess  p50 %8.0f us  p99 %8.0f us\n", o50, o99);
    printf("  ratio out/in  p50 %.3f  p99 %.3f   (target p50 <= 1.10)\n", o50 / i50, o99 / i99);

    const char *tmp = getenv("TMPDIR");
    char tree[4000];
    snprintf(tree, sizeof tree, "%s/sbx-bench-tree-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tree)) {
        perror("mkdtemp");
        return 1;
    }
    make_tree(tree);
    for (int i = 0; i < u; i++) {
        if (i % 2) {
            oop.upload_us[i] = one_upload(&oop, tree, i);
            inp.upload_us[i] = one_upload(&inp, tree, i);
        } else {
            inp.upload_us[i] = one_upload(&inp, tree, i);
            oop.upload_us[i] = one_upload(&oop, tree, i);
        }
    }
    rm_tree(tree);
    o50 = percentile(oop.upload_us, (size_t)u, 0.5);
    i50 = percentile(inp.upload_us, (size_t)u, 0.5);
    printf("upload_dir of a 256 MiB tree (64 files) on %s, %d calls each:\n", backend, u);
    printf("  inprocess     p50 %8.1f ms  (%.0f MiB/s)\n", i50 / 1e3, 256.0 / (i50 / 1e6));
    printf("  outofprocess  p50 %8.1f ms  (%.0f MiB/s)\n", o50 / 1e3, 256.0 / (o50 / 1e6));
    printf("  ratio out/in  p50 %.3f   (target <= 1.10)\n", o50 / i50);

    side_close(&oop);
    side_close(&inp);
    return 0;
}
