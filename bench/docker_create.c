/*
 * bench/docker_create: create -> first exec on docker through libsbx against
 * the raw Engine API sequence made by hand with libcurl (image inspect,
 * container create with the same body shape, start, exec create / start /
 * inspect of `true`), alternating; removal is not timed. Then 20 sandboxes
 * at once from 20 threads (create + exec `true`), library against 20 raw
 * sequences in 20 threads.
 *
 * Output: p50 in milliseconds of each and the ratio library/raw; the wall
 * time of the 20 at once and its ratio. Target (issue "Docker backend"):
 * library/raw <= 1.05 at p50.
 *
 * Usage: docker_create [-n ROUNDS]   (default 10)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "docker_common.h"

#define PARALLEL 20

/* One sandbox by hand; stores its id (free()) for removal. 0 or -1. */
static int raw_create(CURL *h, char **cid)
{
    char path[512], *ans = NULL;
    snprintf(path, sizeof path, "/images/%s/json", bench_image());
    if (raw_call(h, "GET", path, NULL, NULL) != 200)
        return -1;
    char body[1024];
    snprintf(body, sizeof body,
             "{\"Image\":\"%s\",\"Entrypoint\":[\"sleep\"],\"Cmd\":[\"630\"],"
             "\"Env\":[\"SANDBOX_ROOT=\"],\"Labels\":{\"sbx.backend\":\"docker\","
             "\"sbx.create_token\":\"bench\"},\"HostConfig\":{\"NanoCpus\":1000000000,"
             "\"Memory\":1073741824,\"MemorySwap\":1073741824,\"PidsLimit\":4096,"
             "\"Init\":true,\"AutoRemove\":true,\"NetworkMode\":\"none\"}}", bench_image());
    if (raw_call(h, "POST", "/containers/create", body, &ans) != 201) {
        free(ans);
        return -1;
    }
    *cid = raw_id(ans);
    free(ans);
    if (!*cid)
        return -1;
    snprintf(path, sizeof path, "/containers/%s/start", *cid);
    if (raw_call(h, "POST", path, NULL, NULL) != 204)
        return -1;
    return raw_exec(h, *cid, "[\"true\"]") == 0 ? 0 : -1;
}

static void raw_remove(CURL *h, const char *cid)
{
    char path[256];
    snprintf(path, sizeof path, "/containers/%s?force=1&v=1", cid);
    raw_call(h, "DELETE", path, NULL, NULL);
}

static sbx_client *g_client;

/* One sandbox through the library, then its first exec. */
static sbx_sandbox *lib_create(void)
{
    sbx_options *o = sbx_options_new();
    sbx_options_set_allow_internet(o, 0, NULL);
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(g_client, o, &err);
    sbx_options_free(o);
    if (!sb) {
        fprintf(stderr, "docker_create: %s\n", sbx_error_get0_message(err));
        sbx_error_free(err);
        return NULL;
    }
    const char *argv[] = { "true", NULL };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = argv;
    sbx_result *r = sbx_sandbox_execute_command(sb, &req, NULL);
    int ok = r && sbx_result_get_exit_code(r) == 0;
    sbx_result_free(r);
    if (!ok) {
        sbx_sandbox_destroy(sb, NULL);
        sbx_sandbox_free(sb);
        return NULL;
    }
    return sb;
}

typedef struct par {
    int raw;
    int ok;
    sbx_sandbox *sb;
    char *cid;
} par;

static void *par_main(void *arg)
{
    par *p = arg;
    if (p->raw) {
        CURL *h = curl_easy_init();
        p->ok = raw_create(h, &p->cid) == 0;
        curl_easy_cleanup(h);
    } else {
        p->sb = lib_create();
        p->ok = p->sb != NULL;
    }
    return NULL;
}

/* Wall time (ms) of PARALLEL creates at once; removes them afterwards. */
static double parallel(int raw, int *ok)
{
    par p[PARALLEL];
    pthread_t t[PARALLEL];
    memset(p, 0, sizeof p);
    double t0 = now_us();
    for (int i = 0; i < PARALLEL; i++) {
        p[i].raw = raw;
        pthread_create(&t[i], NULL, par_main, &p[i]);
    }
    for (int i = 0; i < PARALLEL; i++)
        pthread_join(t[i], NULL);
    double ms = (now_us() - t0) / 1000.0;
    CURL *h = curl_easy_init();
    *ok = 1;
    for (int i = 0; i < PARALLEL; i++) {
        *ok &= p[i].ok;
        if (p[i].sb) {
            sbx_sandbox_destroy(p[i].sb, NULL);
            sbx_sandbox_free(p[i].sb);
        }
        if (p[i].cid)
            raw_remove(h, p[i].cid);
        free(p[i].cid);
    }
    curl_easy_cleanup(h);
    return ms;
}

int main(int argc, char **argv)
{
    int n = 10, opt;
    while ((opt = getopt(argc, argv, "n:")) != -1) {
        if (opt == 'n')
            n = atoi(optarg);
        else {
            fprintf(stderr, "usage: docker_create [-n ROUNDS]\n");
            return 2;
        }
    }
    if (n < 2)
        n = 2;
    setenv("SBX_DOCKER_IMAGE", bench_image(), 0);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    sbx_error *err = NULL;
    g_client = sbx_client_new("docker", &err);
    if (!g_client) {
        fprintf(stderr, "docker_create: %s\n", sbx_error_get0_message(err));
        return 1;
    }
    CURL *h = curl_easy_init();
    double *lib = calloc((size_t)n, sizeof *lib), *raw = calloc((size_t)n, sizeof *raw);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        double t0 = now_us();
        sbx_sandbox *sb = lib_create();
        double t1 = now_us();
        char *cid = NULL;
        int r = raw_create(h, &cid);
        double t2 = now_us();
        if (!sb || r < 0) {
            fprintf(stderr, "docker_create: round %d failed (%s)\n", i, sb ? "raw" : "library");
            rc = 1;
        }
        lib[i] = (t1 - t0) / 1000.0;
        raw[i] = (t2 - t1) / 1000.0;
        if (sb) {
            sbx_sandbox_destroy(sb, NULL);
            sbx_sandbox_free(sb);
        }
        if (cid)
            raw_remove(h, cid);
        free(cid);
    }
    if (rc == 0) {
        double lp = percentile(lib, (size_t)n, 0.5), rp = percentile(raw, (size_t)n, 0.5);
        printf("create -> first exec, %d rounds\n", n);
        printf("  library      p50 %8.1f ms\n", lp);
        printf("  raw libcurl  p50 %8.1f ms\n", rp);
        printf("  library/raw at p50: %.3f (target <= 1.05)\n", lp / rp);
        int ok1, ok2;
        double lw = parallel(0, &ok1), rw = parallel(1, &ok2);
        if (!ok1 || !ok2) {
            fprintf(stderr, "docker_create: a parallel create failed\n");
            rc = 1;
        }
        printf("%d at once (threads): library %.0f ms, raw %.0f ms, ratio %.3f\n", PARALLEL,
               lw, rw, lw / rw);
    }
    curl_easy_cleanup(h);
    sbx_client_free(g_client);
    free(lib);
    free(raw);
    return rc;
}
