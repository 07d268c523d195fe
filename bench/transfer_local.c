/*
 * bench/transfer_local: directory transfer through libsbx on a live local
 * sandbox against plain `tar -C SRC -cf - . | tar -C DST -xf -` of the same
 * tree, alternating the three in each round so all see the same machine
 * load (the order rotates from round to round).
 *
 * The tree is 256 MiB: one 200 MiB file and 2,000 small files (56 MiB in
 * all, 1..56 KiB each, in 20 directories), made of pseudo-random bytes (no
 * runs of zeros, which the extractor would leave as holes). It is uploaded
 * once to "/bench/tree" in the sandbox; then per round:
 *   baseline : tar -c | tar -x into a fresh directory
 *   upload   : sbx_sandbox_upload_dir(SRC, "/bench/up")
 *   download : sbx_sandbox_download_dir("/bench/tree", fresh local directory)
 * Everything made is removed after each round and at the end.
 *
 * Output: MiB/s per round and the median, and the ratios upload/baseline
 * and download/baseline of the medians (throughput; higher is better).
 * Target (issue "files and directory transfer"): both ratios >= 0.8.
 *
 * Usage: transfer_local [-r ROUNDS] [-b BACKEND]   (default 5, local)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "bench.h"

#define BIG_BYTES ((size_t)200 << 20)
#define SMALL_COUNT 2000
#define SMALL_TOTAL ((size_t)56 << 20)
#define SMALL_DIRS 20

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static void fill_random(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        uint64_t v = rng | 0x0101010101010101ULL;   /* no zero byte at all */
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

static char g_base[4096];        /* everything made on the host */
static sbx_sandbox *g_sb;

static void cleanup(void);

static void die(const char *what)
{
    fprintf(stderr, "transfer_local: %s: %s\n", what, strerror(errno));
    cleanup();
    exit(1);
}

static void die_sbx(const char *what, sbx_error *err)
{
    char *s = sbx_error_to_string(err);
    fprintf(stderr, "transfer_local: %s: %s\n", what, s ? s : "?");
    free(s);
    sbx_error_free(err);
    cleanup();
    exit(1);
}

static void write_file(const char *path, const unsigned char *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        die(path);
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n <= 0)
            die(path);
        data += n;
        len -= (size_t)n;
    }
    close(fd);
}

/* The tree under @src. */
static void make_tree(const char *src)
{
    unsigned char *buf = malloc(BIG_BYTES);
    char path[8192];

    if (!buf)
        die("malloc");
    fill_random(buf, BIG_BYTES);
    snprintf(path, sizeof(path), "%s/big.bin", src);
    write_file(path, buf, BIG_BYTES);
    for (int d = 0; d < SMALL_DIRS; d++) {
        snprintf(path, sizeof(path), "%s/dir%02d", src, d);
        if (mkdir(path, 0755) < 0)
            die(path);
    }
    /* Sizes 1..56 KiB, averaging SMALL_TOTAL / SMALL_COUNT. */
    size_t avg = SMALL_TOTAL / SMALL_COUNT, off = 0;
    for (int i = 0; i < SMALL_COUNT; i++) {
        size_t len = 1024 + (size_t)((i * 7919) % (int)(2 * avg - 2048));
        if (off + len > BIG_BYTES)
            off = 0;
        snprintf(path, sizeof(path), "%s/dir%02d/file%04d.dat", src, i % SMALL_DIRS, i);
        write_file(path, buf + off, len);
        off += len;
    }
    free(buf);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static void rmtree(const char *path)
{
    nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
}

static void cleanup(void)
{
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    if (g_base[0])
        rmtree(g_base);
    g_base[0] = '\0';
}

/* Bytes of regular files under @dir (to report what moved). */
static uint64_t g_bytes;

static int add_size(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path;
    (void)ftw;
    if (flag == FTW_F && S_ISREG(st->st_mode))
        g_bytes += (uint64_t)st->st_size;
    return 0;
}

static uint64_t tree_bytes(const char *dir)
{
    g_bytes = 0;
    nftw(dir, add_size, 32, FTW_PHYS);
    return g_bytes;
}

static double run_baseline(const char *src, const char *dst)
{
    char cmd[16384];

    if (mkdir(dst, 0755) < 0)
        die(dst);
    snprintf(cmd, sizeof(cmd), "tar -C '%s' -cf - . | tar -C '%s' -xf -", src, dst);
    double t0 = now_s();
    int st = system(cmd);
    double dt = now_s() - t0;
    if (st != 0) {
        fprintf(stderr, "transfer_local: baseline failed (status %d)\n", st);
        cleanup();
        exit(1);
    }
    return dt;
}

int main(int argc, char **argv)
{
    const char *backend = "local";
    int rounds = 5, opt;

    while ((opt = getopt(argc, argv, "r:b:")) != -1) {
        if (opt == 'r')
            rounds = atoi(optarg);
        else if (opt == 'b')
            backend = optarg;
        else {
            fprintf(stderr, "usage: transfer_local [-r ROUNDS] [-b BACKEND]\n");
            return 2;
        }
    }
    if (rounds < 1)
        rounds = 1;

    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_create(backend, NULL, &err);
    if (!sb)
        die_sbx("create", err);
    g_sb = sb;

    const char *tmp = getenv("TMPDIR");
    char base[4096], src[4200], dst[4200];
    snprintf(base, sizeof(base), "%s/sbx-bench-transfer-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(base))
        die("mkdtemp");
    memcpy(g_base, base, sizeof(g_base));
    snprintf(src, sizeof(src), "%s/src", base);
    if (mkdir(src, 0755) < 0)
        die(src);
    make_tree(src);
    uint64_t bytes = tree_bytes(src);
    double mib = (double)bytes / (1 << 20);
    printf("tree: %.1f MiB in %d files (+ %d directories), %d rounds, backend %s\n", mib,
           SMALL_COUNT + 1, SMALL_DIRS, rounds, backend);

    double *base_t = calloc((size_t)rounds, sizeof(double));
    double *up_t = calloc((size_t)rounds, sizeof(double));
    double *down_t = calloc((size_t)rounds, sizeof(double));
    if (!base_t || !up_t || !down_t)
        die("calloc");

    /* The tree download_dir copies out, put in place once. */
    if (sbx_sandbox_upload_dir(sb, src, "/bench/tree", &err) < 0)
        die_sbx("upload_dir", err);

    for (int r = 0; r < rounds; r++) {
        snprintf(dst, sizeof(dst), "%s/dst", base);
        /* The order rotates from round to round, so that none of the three
         * always runs first (or right after another one's writes). */
        for (int k = 0; k < 3; k++) {
            int which = (k + r) % 3;
            double t0;
            int64_t n;

            if (which == 0) {
                base_t[r] = run_baseline(src, dst);
                rmtree(dst);
            } else if (which == 1) {
                t0 = now_s();
                n = sbx_sandbox_upload_dir(sb, src, "/bench/up", &err);
                up_t[r] = now_s() - t0;
                if (n < 0)
                    die_sbx("upload_dir", err);
                sbx_result *res = sbx_sandbox_execute_shell(
                    sb, "rm -rf \"$SANDBOX_ROOT/bench/up\"", &err);
                if (!res)
                    die_sbx("cleanup", err);
                sbx_result_free(res);
            } else {
                t0 = now_s();
                n = sbx_sandbox_download_dir(sb, "/bench/tree", dst, &err);
                down_t[r] = now_s() - t0;
                if (n < 0)
                    die_sbx("download_dir", err);
                if (tree_bytes(dst) != bytes) {
                    fprintf(stderr, "transfer_local: downloaded %llu bytes, expected %llu\n",
                            (unsigned long long)g_bytes, (unsigned long long)bytes);
                    cleanup();
                    return 1;
                }
                rmtree(dst);
            }
        }
        printf("round %d: baseline %7.1f MiB/s   upload %7.1f MiB/s   download %7.1f MiB/s\n",
               r + 1, mib / base_t[r], mib / up_t[r], mib / down_t[r]);
        fflush(stdout);
    }

    double mb = median(base_t, rounds), mu = median(up_t, rounds), md = median(down_t, rounds);
    printf("median:  baseline %7.1f MiB/s   upload %7.1f MiB/s   download %7.1f MiB/s\n",
           mib / mb, mib / mu, mib / md);
    printf("ratio (library / tar|tar throughput, target >= 0.80): upload %.2f   download %.2f\n",
           mb / mu, mb / md);

    cleanup();
    free(base_t);
    free(up_t);
    free(down_t);
    return 0;
}
