/*
 * bench/docker_transfer: directory transfer on a live docker sandbox through
 * libsbx against raw `tar | curl` to the Engine's archive endpoint,
 * alternating in each round:
 *   upload   : sbx_sandbox_upload_dir(SRC, "/bench/up")
 *              vs tar -C SRC -cf - . | curl -T - PUT .../archive?path=/bench/rawup
 *   download : sbx_sandbox_download_dir("/bench/tree", fresh local dir)
 *              vs curl GET .../archive?path=/bench/tree/. | tar -C DST -xf -
 * The tree is 256 MiB: one 200 MiB file and 2,000 small files (1..56 KiB,
 * in 20 directories) of pseudo-random bytes; it is uploaded once to
 * /bench/tree. What a round made is removed after it.
 *
 * Output: MiB/s per round, the medians and the ratios library/raw
 * (throughput; higher is better). Target (issue "Docker backend"): >= 0.8.
 *
 * Usage: docker_transfer [-r ROUNDS]   (default 3)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "docker_common.h"

#define BIG ((size_t)200 << 20)
#define SMALL_TOTAL ((size_t)56 << 20)
#define TREE_MIB 256.0

static uint64_t rng = 88172645463325252ULL;

static void fill(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        p[i] = (unsigned char)(rng | 1);     /* never a zero: no holes */
    }
}

static int write_file(const char *path, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    static unsigned char buf[1 << 20];
    while (n > 0) {
        size_t k = n < sizeof buf ? n : sizeof buf;
        fill(buf, k);
        if (write(fd, buf, k) != (ssize_t)k) {
            close(fd);
            return -1;
        }
        n -= k;
    }
    return close(fd);
}

static int make_tree(const char *dir)
{
    char p[4096];
    if (mkdir(dir, 0755) < 0)
        return -1;
    snprintf(p, sizeof p, "%s/big.bin", dir);
    if (write_file(p, BIG) < 0)
        return -1;
    size_t left = SMALL_TOTAL;
    for (int i = 0; i < 2000; i++) {
        if (i % 100 == 0) {
            snprintf(p, sizeof p, "%s/d%02d", dir, i / 100);
            if (mkdir(p, 0755) < 0)
                return -1;
        }
        size_t n = i == 1999 ? left : (size_t)(1024 + (rng % (55 * 1024)));
        if (n > left)
            n = left;
        left -= n;
        snprintf(p, sizeof p, "%s/d%02d/f%04d", dir, i / 100, i);
        if (write_file(p, n) < 0)
            return -1;
    }
    return 0;
}

static int sh(const char *cmd)
{
    int r = system(cmd);
    return r == 0 ? 0 : -1;
}

static int in_sandbox(sbx_sandbox *sb, const char *script)
{
    sbx_result *r = sbx_sandbox_execute_shell(sb, script, NULL);
    int ok = r && sbx_result_get_exit_code(r) == 0;
    sbx_result_free(r);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    int rounds = 3, opt;
    while ((opt = getopt(argc, argv, "r:")) != -1) {
        if (opt == 'r')
            rounds = atoi(optarg);
        else {
            fprintf(stderr, "usage: docker_transfer [-r ROUNDS]\n");
            return 2;
        }
    }
    if (rounds < 1)
        rounds = 1;
    setenv("SBX_DOCKER_IMAGE", bench_image(), 0);
    char tmpl[] = "/tmp/sbx-bench-transfer-XXXXXX";
    const char *base = mkdtemp(tmpl);
    if (!base) {
        perror("mkdtemp");
        return 1;
    }
    char src[256], cmd[2048], dst[256];
    snprintf(src, sizeof src, "%s/src", base);
    if (make_tree(src) < 0) {
        perror("making the tree");
        return 1;
    }
    sbx_error *err = NULL;
    sbx_options *o = sbx_options_new();
    sbx_options_set_allow_internet(o, 0, NULL);
    sbx_options_set_timeout_secs(o, 3600, NULL);
    sbx_sandbox *sb = sbx_create("docker", o, &err);
    sbx_options_free(o);
    int rc = 0;
    if (!sb) {
        fprintf(stderr, "docker_transfer: create: %s\n", sbx_error_get0_message(err));
        rc = 1;
        goto out;
    }
    const char *cid = sbx_sandbox_get0_id(sb);
    if (sbx_sandbox_upload_dir(sb, src, "/bench/tree", &err) < 0) {
        fprintf(stderr, "docker_transfer: upload: %s\n", sbx_error_get0_message(err));
        rc = 1;
        goto out;
    }
    double *ul = calloc((size_t)rounds, sizeof(double)), *ur = calloc((size_t)rounds, sizeof(double));
    double *dl = calloc((size_t)rounds, sizeof(double)), *dr = calloc((size_t)rounds, sizeof(double));
    for (int i = 0; i < rounds && rc == 0; i++) {
        double t0 = now_us();
        if (sbx_sandbox_upload_dir(sb, src, "/bench/up", &err) < 0) {
            fprintf(stderr, "upload_dir: %s\n", sbx_error_get0_message(err));
            rc = 1;
            break;
        }
        double t1 = now_us();
        in_sandbox(sb, "mkdir -p /bench/rawup");
        snprintf(cmd, sizeof cmd,
                 "tar -C '%s' -cf - . | curl -sf --unix-socket '%s' -X PUT "
                 "-H 'Content-Type: application/x-tar' -T - "
                 "'http://localhost/v1.41/containers/%s/archive?path=/bench/rawup'",
                 src, bench_socket(), cid);
        double t2 = now_us();
        if (sh(cmd) < 0) {
            fprintf(stderr, "raw upload failed\n");
            rc = 1;
            break;
        }
        double t3 = now_us();
        ul[i] = TREE_MIB / ((t1 - t0) / 1e6);
        ur[i] = TREE_MIB / ((t3 - t2) / 1e6);
        in_sandbox(sb, "rm -rf /bench/up /bench/rawup");

        snprintf(dst, sizeof dst, "%s/dl%d", base, i);
        t0 = now_us();
        if (sbx_sandbox_download_dir(sb, "/bench/tree", dst, &err) < 0) {
            fprintf(stderr, "download_dir: %s\n", sbx_error_get0_message(err));
            rc = 1;
            break;
        }
        t1 = now_us();
        snprintf(cmd, sizeof cmd, "rm -rf '%s'; mkdir '%s'", dst, dst);
        sh(cmd);
        snprintf(cmd, sizeof cmd,
                 "curl -sf --unix-socket '%s' "
                 "'http://localhost/v1.41/containers/%s/archive?path=/bench/tree/.' "
                 "| tar -C '%s' -xf -", bench_socket(), cid, dst);
        t2 = now_us();
        if (sh(cmd) < 0) {
            fprintf(stderr, "raw download failed\n");
            rc = 1;
            break;
        }
        t3 = now_us();
        dl[i] = TREE_MIB / ((t1 - t0) / 1e6);
        dr[i] = TREE_MIB / ((t3 - t2) / 1e6);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dst);
        sh(cmd);
        printf("round %d: upload library %.0f MiB/s raw %.0f MiB/s; download library %.0f "
               "MiB/s raw %.0f MiB/s\n", i + 1, ul[i], ur[i], dl[i], dr[i]);
    }
    if (rc == 0) {
        double a = median(ul, rounds), b = median(ur, rounds);
        double c = median(dl, rounds), d = median(dr, rounds);
        printf("256 MiB tree, %d rounds (medians)\n", rounds);
        printf("  upload_dir    library %6.0f MiB/s  tar|curl %6.0f MiB/s  ratio %.2f "
               "(target >= 0.8)\n", a, b, a / b);
        printf("  download_dir  library %6.0f MiB/s  curl|tar %6.0f MiB/s  ratio %.2f "
               "(target >= 0.8)\n", c, d, c / d);
    }
    free(ul);
    free(ur);
    free(dl);
    free(dr);
out:
    if (sb) {
        sbx_sandbox_destroy(sb, NULL);
        sbx_sandbox_free(sb);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    sh(cmd);
    return rc;
}
