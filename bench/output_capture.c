/*
 * bench/output_capture: throughput of a command's stdout through libsbx
 * against a raw pipe reader in the caller, alternating in one run.
 *
 * The command is `head -c 268435456 /dev/zero` (256 MiB). Four ways, in
 * turn in each round:
 *   raw reader        posix_spawn the command, read() the pipe to EOF into
 *                     one 64 KiB buffer (nothing kept)
 *   libsbx callback   an output callback that counts bytes, with
 *                     SBX_EXEC_NO_CAPTURE (nothing kept)
 *   raw keeping       the raw reader reading into a buffer that grows to
 *                     hold all 256 MiB, as a caller keeping the output must
 *   libsbx captured   the output kept in the result (256 MiB output limit)
 * Prints MiB/s of each and the ratios (higher is better): callback against
 * the raw reader, captured against the raw reader that keeps the bytes
 * (both pay for 256 MiB of fresh memory: on a VM the page faults alone cost
 * about as much as moving the bytes) and, for reference, captured against
 * the raw reader. Target: >= 0.8 for the first two.
 *
 * Usage: output_capture [-r ROUNDS] [-b BACKEND]   (default 5, local)
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sbx/sbx.h>

extern char **environ;

#define TOTAL ((size_t)256 << 20)
#define COMMAND "head -c 268435456 /dev/zero"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The raw side: reads to EOF, keeping the bytes when @keep. */
static size_t raw_read(int keep)
{
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0)
        return 0;
    char *const argv[] = {"/bin/sh", "-c", COMMAND, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (rc != 0) {
        close(out[0]);
        return 0;
    }
    static char buf[65536];
    char *kept = NULL;
    size_t total = 0, cap = 0;
    ssize_t n;
    for (;;) {
        char *dst = buf;
        if (keep) {
            if (cap - total < sizeof buf) {
                cap = cap ? cap * 2 : sizeof buf;
                char *p = realloc(kept, cap);
                if (!p) {
                    perror("output_capture: realloc");
                    exit(1);
                }
                kept = p;
            }
            dst = kept + total;
        }
        n = read(out[0], dst, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        total += (size_t)n;
    }
    free(kept);
    close(out[0]);
    int status;
    waitpid(pid, &status, 0);
    return total;
}

static void count_cb(sbx_stream stream, const void *data, size_t len, void *user_data)
{
    (void)stream;
    (void)data;
    *(size_t *)user_data += len;
}

static size_t lib_read(sbx_sandbox *sb, int capture)
{
    size_t total = 0;
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = COMMAND;
    if (capture) {
        req.output_limit = TOTAL;
    } else {
        req.on_output = count_cb;
        req.user_data = &total;
        req.flags = SBX_EXEC_NO_CAPTURE;
    }
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_command(sb, &req, &err);
    if (!r) {
        fprintf(stderr, "output_capture: %s\n", sbx_error_get0_message(err));
        sbx_error_free(err);
        exit(1);
    }
    if (capture)
        sbx_result_get0_stdout(r, &total);
    sbx_result_free(r);
    return total;
}

int main(int argc, char **argv)
{
    int rounds = 5;
    const char *backend = "local";
    int opt;
    while ((opt = getopt(argc, argv, "r:b:")) != -1) {
        if (opt == 'r')
            rounds = atoi(optarg);
        else if (opt == 'b')
            backend = optarg;
        else {
            fprintf(stderr, "usage: output_capture [-r ROUNDS] [-b BACKEND]\n");
            return 2;
        }
    }
    if (rounds < 1)
        rounds = 1;
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_create(backend, NULL, &err);
    if (!sb) {
        fprintf(stderr, "output_capture: %s\n", sbx_error_get0_message(err));
        sbx_error_free(err);
        return 1;
    }
    double t_raw = 0, t_cb = 0, t_keep = 0, t_cap = 0;
    for (int i = 0; i < rounds; i++) {
        double t0 = now_s();
        size_t a = raw_read(0);
        double t1 = now_s();
        size_t b = lib_read(sb, 0);
        double t2 = now_s();
        size_t c = raw_read(1);
        double t3 = now_s();
        size_t d = lib_read(sb, 1);
        double t4 = now_s();
        if (a != TOTAL || b != TOTAL || c != TOTAL || d != TOTAL) {
            fprintf(stderr, "output_capture: byte counts %zu %zu %zu %zu, expected %zu\n",
                    a, b, c, d, TOTAL);
            return 1;
        }
        t_raw += t1 - t0;
        t_cb += t2 - t1;
        t_keep += t3 - t2;
        t_cap += t4 - t3;
    }
    double mib = (double)rounds * 256.0;
    printf("output_capture: backend %s, %d rounds of 256 MiB\n", backend, rounds);
    printf("raw pipe reader      %8.1f MiB/s\n", mib / t_raw);
    printf("libsbx callback      %8.1f MiB/s  ratio %.3f (against the raw reader)\n",
           mib / t_cb, t_raw / t_cb);
    printf("raw reader, keeping  %8.1f MiB/s\n", mib / t_keep);
    printf("libsbx captured      %8.1f MiB/s  ratio %.3f (against the raw reader keeping the "
           "bytes), %.3f (against the raw reader)\n", mib / t_cap, t_keep / t_cap, t_raw / t_cap);
    sbx_sandbox_destroy(sb, NULL);
    sbx_sandbox_free(sb);
    return 0;
}
