#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "testutil.h"

#include <criterion/criterion.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <json-c/json.h>

const char *tu_backend(void)
{
    const char *b = getenv("SBX_TEST_BACKEND");
    return b && *b ? b : "local";
}

int tu_backend_is_local(void)
{
    /* safehouse is local with every command wrapped by its CLI. */
    return strcmp(tu_backend(), "local") == 0 || strcmp(tu_backend(), "safehouse") == 0;
}

int tu_backend_host_dirs(void)
{
    const char *b = tu_backend();
    if (strcmp(b, "remote") == 0) {
        b = getenv("BESPOKE_SANDBOX_BACKEND");
        b = b ? b : "";
    }
    return strcmp(b, "local") == 0 || strcmp(b, "safehouse") == 0;
}

double tu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

char *tu_strdup_printf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0 && s, "out of memory");
    return s;
}

char *tu_mkdtemp(const char *prefix)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    char *tmpl = tu_strdup_printf("%s/%s-XXXXXX", base, prefix);
    cr_assert(mkdtemp(tmpl) != NULL, "mkdtemp(%s): %s", tmpl, strerror(errno));
    return tmpl;
}

char *tu_fresh_tmpdir(void)
{
    char *dir = tu_mkdtemp("sbx-test");
    /* Searchable by others: a bubblewrap sandbox of a library running as
     * root runs as uid 65534, and its bwrap passes through TMPDIR. */
    cr_assert(chmod(dir, 0711) == 0, "chmod(%s): %s", dir, strerror(errno));
    cr_assert(setenv("TMPDIR", dir, 1) == 0);
    return dir;
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

/* Whether directory @path holds a local sandbox's trash (a meta directory
 * its supervisor renamed at destroy and removes after answering). */
static int holds_trash(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL)
        found = strncmp(e->d_name, ".sbx-trash-", 11) == 0;
    closedir(d);
    return found;
}

/* Waits (at most 5 s) until @path holds no trash of a destroyed sandbox. */
static void wait_trash_gone(const char *path)
{
    double end = tu_now() + 5.0;
    while (holds_trash(path) && tu_now() < end)
        usleep(2000);
}

void tu_rmtree(const char *path)
{
    if (!path)
        return;
    wait_trash_gone(path);
    /* What a sandbox's keeper or a plugin host's spare removes after its
     * end may still be going (every end of a sandbox is bounded by 5 s):
     * again until the directory itself is gone. */
    double end = tu_now() + 5.0;
    for (;;) {
        nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
        if (!tu_exists(path) || tu_now() >= end)
            break;
        usleep(20000);
    }
}

int tu_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Entries of @path (without . and ..) that are spares (@spares) or not
 * (!@spares); -1 if it cannot be opened. */
static int count_kind(const char *path, int spares)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if ((strncmp(e->d_name, ".sbx-spare-", 11) == 0) == spares)
            n++;
    }
    closedir(d);
    return n;
}

int tu_count_entries(const char *path)
{
    wait_trash_gone(path);
    return count_kind(path, 0);
}

int tu_wait_spares_gone(const char *path, double secs)
{
    double end = tu_now() + secs;
    int n;
    while ((n = count_kind(path, 1)) > 0 && tu_now() < end)
        usleep(2000);
    return n;
}

void tu_write_file(const char *path, const void *data, size_t len, unsigned mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, (mode_t)mode);
    cr_assert(fd >= 0, "open(%s): %s", path, strerror(errno));
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        cr_assert(w > 0, "write(%s): %s", path, strerror(errno));
        p += w;
        len -= (size_t)w;
    }
    cr_assert(fchmod(fd, (mode_t)mode) == 0);
    close(fd);
}

static void assert_no_error(sbx_error *err, const char *what)
{
    if (!err)
        return;
    char *s = sbx_error_to_string(err);
    cr_assert_fail("%s failed: %s", what, s ? s : "(no string)");
}

sbx_sandbox *tu_create(sbx_client *client, const sbx_options *options)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(client, options, &err);
    assert_no_error(err, "sbx_sandbox_create");
    cr_assert_not_null(sb, "sbx_sandbox_create returned NULL without an error");
    return sb;
}

sbx_result *tu_exec(sbx_sandbox *sb, const sbx_exec_request *req)
{
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_command(sb, req, &err);
    assert_no_error(err, "sbx_sandbox_execute_command");
    cr_assert_not_null(r, "execute_command returned NULL without an error");
    return r;
}

sbx_result *tu_sh(sbx_sandbox *sb, const char *script, double timeout_secs)
{
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = script;
    req.timeout_secs = timeout_secs;
    return tu_exec(sb, &req);
}

sbx_error *tu_exec_fail(sbx_sandbox *sb, const sbx_exec_request *req,
                        sbx_error_code code)
{
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_command(sb, req, &err);
    if (r) {
        size_t len = 0;
        const char *out = sbx_result_get0_stdout(r, &len);
        cr_assert_fail("execute_command succeeded (exit %d, stdout %.*s) but an error "
                 "with code %s was expected",
                 sbx_result_get_exit_code(r), (int)(len > 200 ? 200 : len), out,
                 sbx_error_code_name(code));
    }
    cr_assert_not_null(err, "execute_command returned NULL without an error");
    cr_assert_eq(sbx_error_get_code(err), code,
                 "error code %s, expected %s (message: %s)",
                 sbx_error_code_name(sbx_error_get_code(err)),
                 sbx_error_code_name(code), sbx_error_get0_message(err));
    return err;
}

double tu_expires_at(const sbx_error *err)
{
    const char *when = sbx_error_get0_context(err, "expires_at");
    cr_assert_not_null(when, "no expires_at in: %s", sbx_error_get0_message(err));
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cr_assert(end && *end == '\0', "expires_at \"%s\" is not YYYY-MM-DDTHH:MM:SSZ", when);
    return (double)timegm(&tm);
}

char *tu_assert_expired(const sbx_error *err, const char *id, double wall0, double took,
                        double lifetime)
{
    double t_exp = tu_expires_at(err);
    const char *when = sbx_error_get0_context(err, "expires_at");
    cr_assert(t_exp >= wall0 + lifetime - 1.0 && t_exp <= wall0 + took + lifetime,
              "expiry %s is not %g s after readiness", when, lifetime);
    char *want = tu_strdup_printf("sandbox %s expired at %s (lifetime %g s)", id, when, lifetime);
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    return want;
}

static void printable(char *dst, size_t dstlen, const unsigned char *p, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < dstlen; i++) {
        if (isprint(p[i]) && p[i] != '\\')
            dst[o++] = (char)p[i];
        else
            o += (size_t)snprintf(dst + o, dstlen - o, "\\x%02x", p[i]);
    }
    dst[o] = '\0';
}

void tu_assert_bytes(const char *what, const void *got, size_t got_len,
                     const void *want, size_t want_len)
{
    cr_assert_not_null(got, "%s is NULL", what);
    const unsigned char *g = got, *w = want;
    size_t n = got_len < want_len ? got_len : want_len;
    size_t i = 0;
    while (i < n && g[i] == w[i])
        i++;
    if (i == n && got_len == want_len)
        return;
    char gs[200], ws[200];
    size_t from = i > 16 ? i - 16 : 0;
    size_t gn = from < got_len ? (got_len - from < 32 ? got_len - from : 32) : 0;
    size_t wn = from < want_len ? (want_len - from < 32 ? want_len - from : 32) : 0;
    printable(gs, sizeof gs, g + from, gn);
    printable(ws, sizeof ws, w + from, wn);
    cr_assert_fail("%s: %zu bytes, expected %zu; first difference at offset %zu; "
             "from offset %zu got \"%s\", expected \"%s\"",
             what, got_len, want_len, i, from, gs, ws);
}

void tu_assert_stdout_bytes(const sbx_result *r, const void *want, size_t len)
{
    size_t n = (size_t)-1;
    const char *p = sbx_result_get0_stdout(r, &n);
    cr_assert_not_null(p, "stdout is NULL (must be a buffer, even when empty)");
    tu_assert_bytes("stdout", p, n, want, len);
}

void tu_assert_stderr_bytes(const sbx_result *r, const void *want, size_t len)
{
    size_t n = (size_t)-1;
    const char *p = sbx_result_get0_stderr(r, &n);
    cr_assert_not_null(p, "stderr is NULL (must be a buffer, even when empty)");
    tu_assert_bytes("stderr", p, n, want, len);
}

void tu_assert_stdout(const sbx_result *r, const char *want)
{
    tu_assert_stdout_bytes(r, want, strlen(want));
}

void tu_assert_stderr(const sbx_result *r, const char *want)
{
    tu_assert_stderr_bytes(r, want, strlen(want));
}

void tu_assert_exit(const sbx_result *r, int code)
{
    size_t elen = 0;
    const char *e = sbx_result_get0_stderr(r, &elen);
    cr_assert_eq(sbx_result_get_exit_code(r), code,
                 "exit code %d, expected %d (stderr: %.*s)",
                 sbx_result_get_exit_code(r), code, (int)(elen > 300 ? 300 : elen),
                 e ? e : "");
    cr_assert_eq(sbx_result_is_timed_out(r), 0, "timed_out set");
    cr_assert_eq(sbx_result_is_stdout_truncated(r), 0, "stdout_truncated set");
    cr_assert_eq(sbx_result_is_stderr_truncated(r), 0, "stderr_truncated set");
}

/* ------------------------------------------------------------------ SHA-256 */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const unsigned char *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5],
             g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t S1 = ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = k + S1 + ch + K256[i] + w[i];
        uint32_t S0 = ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
}

void tu_sha256_hex(const void *data, size_t len, char hex[65])
{
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const unsigned char *p = data;
    size_t left = len;
    while (left >= 64) {
        sha256_block(h, p);
        p += 64;
        left -= 64;
    }
    unsigned char tail[128];
    memset(tail, 0, sizeof tail);
    if (left)
        memcpy(tail, p, left);
    tail[left] = 0x80;
    size_t tlen = left + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[tlen - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha256_block(h, tail);
    if (tlen == 128)
        sha256_block(h, tail + 64);
    for (int i = 0; i < 8; i++)
        snprintf(hex + 8 * i, 9, "%08x", h[i]);
    hex[64] = '\0';
}

/* ------------------------------------------------------------------ errors */

char *tu_expected_error_string(const sbx_error *error)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    cr_assert_not_null(f);
    fprintf(f, "%s [code=%s", sbx_error_get0_message(error),
            sbx_error_code_name(sbx_error_get_code(error)));
    if (sbx_error_is_retryable(error))
        fputs(", retryable", f);
    if (sbx_error_get_outcome(error) == SBX_ERROR_OUTCOME_UNKNOWN)
        fputs(", outcome=unknown", f);
    if (*sbx_error_get0_backend(error))
        fprintf(f, "; backend=%s", sbx_error_get0_backend(error));
    if (*sbx_error_get0_op(error))
        fprintf(f, "; op=%s", sbx_error_get0_op(error));
    size_t n = sbx_error_get_context_count(error);
    for (size_t i = 0; i < n; i++) {
        const char *k = NULL, *v = NULL;
        cr_assert_eq(sbx_error_get0_context_at(error, i, &k, &v), 0);
        fprintf(f, "; %s=", k);
        for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
            if (*c == '\n')
                fputs("\\n", f);
            else if (*c == '\r')
                fputs("\\r", f);
            else if (*c == '\t')
                fputs("\\t", f);
            else if (*c < 0x20 || *c == 0x7f)
                fprintf(f, "\\x%02x", *c);
            else
                fputc(*c, f);
        }
    }
    fputc(']', f);
    fclose(f);
    return buf;
}

void tu_assert_error(const sbx_error *error, sbx_error_code code, ...)
{
    cr_assert_not_null(error, "no error was stored (expected %s)",
                       sbx_error_code_name(code));
    const char *msg = sbx_error_get0_message(error);
    cr_assert_eq(sbx_error_get_code(error), code,
                 "error code %s, expected %s (message: %s)",
                 sbx_error_code_name(sbx_error_get_code(error)),
                 sbx_error_code_name(code), msg);
    va_list ap;
    va_start(ap, code);
    const char *want;
    while ((want = va_arg(ap, const char *)) != NULL)
        cr_assert(strstr(msg, want) != NULL,
                  "error message \"%s\" does not contain \"%s\"", msg, want);
    va_end(ap);
}

/* --------------------------------------------------------------- processes */

size_t tu_read_pids(sbx_sandbox *sb, const char *sandbox_path, pid_t *pids,
                    size_t max)
{
    char *script = tu_strdup_printf("cat \"%s\"", sandbox_path);
    sbx_result *r = tu_sh(sb, script, 10);
    free(script);
    tu_assert_exit(r, 0);
    const char *p = sbx_result_get0_stdout(r, NULL);
    size_t n = 0;
    while (*p && n < max) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        cr_assert(v > 1, "bad pid %ld in %s", v, sandbox_path);
        pids[n++] = (pid_t)v;
        p = end;
    }
    sbx_result_free(r);
    cr_assert(n > 0, "no pid in %s", sandbox_path);
    return n;
}

pid_t tu_bwrap_pid(const char *id)
{
    pid_t cand[8], found = 0;
    size_t nc = tu_procs_mentioning(id, cand, 8), nb = 0;
    for (size_t i = 0; i < nc; i++) {
        char comm_path[64], comm[32] = "";
        snprintf(comm_path, sizeof comm_path, "/proc/%d/comm", (int)cand[i]);
        FILE *cf = fopen(comm_path, "r");
        if (cf) {
            if (!fgets(comm, sizeof comm, cf))
                comm[0] = '\0';
            fclose(cf);
        }
        if (strcmp(comm, "bwrap\n") == 0) {
            found = cand[i];
            nb++;
        }
    }
    cr_assert_eq(nb, 1, "not one bwrap process names %s", id);
    return found;
}

pid_t tu_host_pid(sbx_sandbox *sb, pid_t pid)
{
    if (strcmp(tu_backend(), "bubblewrap") != 0)
        return pid;
    /* The supervisor is the only child of the bwrap process whose command
     * line names the sandbox's directory (so its id). */
    const char *id = sbx_sandbox_get0_id(sb);
    pid_t bw[1] = { tu_bwrap_pid(id) };
    char ns[64] = "", link[64], target[64], path[64], buf[4096];
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long v = strtol(e->d_name, NULL, 10);
        if (v <= 0 || tu_ppid((pid_t)v) != bw[0])
            continue;
        snprintf(link, sizeof link, "/proc/%ld/ns/pid", v);
        ssize_t l = readlink(link, ns, sizeof ns - 1);
        ns[l > 0 ? l : 0] = '\0';
    }
    rewinddir(d);
    cr_assert(ns[0], "bwrap %d has no child", (int)bw[0]);
    pid_t found = 0;
    while (!found && (e = readdir(d)) != NULL) {
        long v = strtol(e->d_name, NULL, 10);
        if (v <= 0)
            continue;
        snprintf(link, sizeof link, "/proc/%ld/ns/pid", v);
        ssize_t l = readlink(link, target, sizeof target - 1);
        if (l <= 0)
            continue;
        target[l] = '\0';
        if (strcmp(target, ns) != 0)
            continue;
        snprintf(path, sizeof path, "/proc/%ld/status", v);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        while (fgets(buf, sizeof buf, f)) {
            if (strncmp(buf, "NSpid:", 6) != 0)
                continue;
            char *last = strrchr(buf, '\t');
            if (last && strtol(last + 1, NULL, 10) == (long)pid)
                found = (pid_t)v;
            break;
        }
        fclose(f);
    }
    closedir(d);
    cr_assert(found > 0, "no process of sandbox %s has pid %d inside", id, (int)pid);
    return found;
}

/* The fields of /proc/PID/stat after the command name ("S 123 ..."), in
 * @buf; NULL when the process is gone. */
static const char *proc_stat_fields(pid_t pid, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    if (!rp || rp[1] != ' ')
        return NULL;
    return rp + 2;
}

pid_t tu_ppid(pid_t pid)
{
    char buf[512];
    const char *f = proc_stat_fields(pid, buf, sizeof buf);
    if (!f)
        return -1;
    int ppid;
    if (sscanf(f, "%*c %d", &ppid) != 1)
        return -1;
    return (pid_t)ppid;
}

const char *tu_proc_describe(pid_t pid)
{
    static char out[512];
    char buf[512], cmd[256] = "";
    const char *f = proc_stat_fields(pid, buf, sizeof buf);
    if (!f) {
        snprintf(out, sizeof out, "pid %d: gone", (int)pid);
        return out;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, cmd, sizeof cmd - 1);
        close(fd);
        for (ssize_t i = 0; i < n; i++)
            if (cmd[i] == '\0')
                cmd[i] = ' ';
        cmd[n > 0 ? n : 0] = '\0';
    }
    int ppid = -1;
    sscanf(f, "%*c %d", &ppid);
    snprintf(out, sizeof out, "pid %d: state %c, parent %d, %s", (int)pid, f[0], ppid, cmd);
    return out;
}

static char proc_state(pid_t pid)
{
    char buf[512];
    const char *f = proc_stat_fields(pid, buf, sizeof buf);
    return f ? f[0] : 0;
}

int tu_pid_gone(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    char st = proc_state(pid);
    return st == 0 || st == 'Z' || st == 'X';
}

/* The processes tu_stop_pid() stopped, for tu_continue_stopped(). */
static pid_t stopped_pids[32];
static size_t n_stopped;

void tu_continue_stopped(void)
{
    for (size_t i = 0; i < n_stopped; i++)
        kill(stopped_pids[i], SIGCONT);
    n_stopped = 0;
}

void tu_stop_pid(pid_t pid)
{
    if (n_stopped < sizeof stopped_pids / sizeof stopped_pids[0])
        stopped_pids[n_stopped++] = pid;
    cr_assert_eq(kill(pid, SIGSTOP), 0, "SIGSTOP to %d: %s", (int)pid, strerror(errno));
    double end = tu_now() + 5.0;
    while (proc_state(pid) != 'T') {
        cr_assert(tu_now() < end, "%d is not stopped 5 s after SIGSTOP (state %c)", (int)pid,
                  proc_state(pid) ? proc_state(pid) : '?');
        usleep(1000);
    }
}

int tu_wait_pid_gone(pid_t pid, double secs)
{
    double end = tu_now() + secs;
    for (;;) {
        if (tu_pid_gone(pid))
            return 1;
        if (tu_now() >= end)
            return 0;
        usleep(20000);
    }
}

static int file_mentions(const char *file, const char *needle)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    for (;;) {
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    int found = memmem(buf, len, needle, strlen(needle)) != NULL;
    free(buf);
    return found;
}

static int link_mentions(const char *link, const char *needle)
{
    char target[4096];
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return 0;
    target[n] = '\0';
    return strstr(target, needle) != NULL;
}

static int proc_mentions(pid_t pid, const char *needle)
{
    char path[128];
    snprintf(path, sizeof path, "/proc/%d/cwd", (int)pid);
    if (link_mentions(path, needle))
        return 1;
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    if (file_mentions(path, needle))
        return 1;
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    if (file_mentions(path, needle))
        return 1;
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char fdpath[300];
        snprintf(fdpath, sizeof fdpath, "/proc/%d/fd/%s", (int)pid, e->d_name);
        found = link_mentions(fdpath, needle);
    }
    closedir(d);
    return found;
}

int tu_is_plugin_host(pid_t pid)
{
    const char *host = getenv("SBX_PLUGIN_HOST");
    char exe[64];
    struct stat a, b;

    if (!host || !*host)
        return 0;
    snprintf(exe, sizeof exe, "/proc/%d/exe", (int)pid);
    return stat(exe, &a) == 0 && stat(host, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* Seconds the processes of a sandbox are given past tu_wait_procs_gone()'s
 * own bound before they count as left behind. */
#define TU_ENDING_GRACE_SECS 30.0

size_t tu_wait_procs_gone(const char *path, pid_t *pids, size_t max, double secs)
{
    /* Past the bound, a sandbox's processes may still be ending: destroy
     * returns before bubblewrap's keeper has removed the sandbox's
     * directory and exited, which a machine busy with other suites' I/O
     * and CPU has taken seconds over (the keeper running, in state R;
     * asleep waiting for bwrap, S; the kernel tearing down the overlay and
     * namespaces, D). A process left behind is there for good: it is
     * reported once the grace is over too. */
    double end = tu_now() + secs + TU_ENDING_GRACE_SECS;
    size_t n;
    for (;;) {
        n = tu_procs_mentioning(path, pids, max);
        if (n == 0 || tu_now() >= end)
            break;
        usleep(20000);
    }
    return n;
}

size_t tu_wait_count(size_t (*count)(void), size_t want, double secs)
{
    double end = tu_now() + secs;
    size_t n = count();
    while (n != want && tu_now() < end) {
        usleep(100000);
        n = count();
    }
    return n;
}

size_t tu_pids_where(int (*match)(pid_t pid, void *ud), void *ud, pid_t *pids, size_t max)
{
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    size_t n = 0;
    struct dirent *e;
    pid_t self = getpid();
    while (n < max && (e = readdir(d)) != NULL) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (*end || v <= 0 || (pid_t)v == self || !match((pid_t)v, ud))
            continue;
        if (pids)
            pids[n] = (pid_t)v;
        n++;
    }
    closedir(d);
    return n;
}

ssize_t tu_cmdline(pid_t pid, char *buf, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t len = read(fd, buf, cap - 1);
    close(fd);
    if (len > 0 && buf[len - 1] == '\0')
        len--;      /* the last argument's NUL */
    if (len <= 0)
        return -1;
    for (ssize_t i = 0; i < len; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    buf[len] = '\0';
    return len;
}

/* tu_procs_mentioning()'s test: a running process, not one of this test's
 * own plugin hosts (they carry its environment too; they are the
 * application's side, not the sandbox's), that mentions @ud, a path. */
static int mentions_path(pid_t pid, void *ud)
{
    return !tu_pid_gone(pid) && !(tu_ppid(pid) == getpid() && tu_is_plugin_host(pid))
           && proc_mentions(pid, ud);
}

size_t tu_procs_mentioning(const char *path, pid_t *pids, size_t max)
{
    return tu_pids_where(mentions_path, (void *)path, pids, max);
}

/* ------------------------------------------------------------------------
 * The hosted backends' contract fakes
 * ---------------------------------------------------------------------- */

static int tu_fake_port;

int tu_fake_use(const char *env)
{
    const char *url = getenv(env);
    int port = 0;
    cr_assert(url && sscanf(url, "http://127.0.0.1:%d", &port) == 1 && port > 0,
              "%s (%s) is not a fake's http://127.0.0.1:PORT: run tests/hosted.sh", env,
              url ? url : "unset");
    tu_fake_port = port;
    return port;
}

int tu_fake_http(const char *method, const char *path, const char *header, const char *body,
                 char **out)
{
    cr_assert(tu_fake_port > 0, "tu_fake_use() was not called");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)tu_fake_port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect to the fake: %s",
                 strerror(errno));
    char *req = tu_strdup_printf("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                                 "%s%sContent-Type: application/json\r\n"
                                 "Content-Length: %zu\r\n\r\n%s",
                                 method, path, header ? header : "", header ? "\r\n" : "",
                                 body ? strlen(body) : 0, body ? body : "");
    size_t len = strlen(req), off = 0;
    while (off < len) {
        ssize_t w = write(fd, req + off, len - off);
        cr_assert(w > 0, "write to the fake: %s", strerror(errno));
        off += (size_t)w;
    }
    free(req);
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    for (;;) {
        if (n + 4096 > cap) {
            buf = realloc(buf, cap *= 2);
            cr_assert_not_null(buf);
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        cr_assert(r >= 0, "read from the fake: %s", strerror(errno));
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    int status = 0;
    cr_assert_eq(sscanf(buf, "HTTP/1.%*d %d", &status), 1, "not HTTP: %.80s", buf);
    char *b = strstr(buf, "\r\n\r\n");
    if (out)
        *out = b ? strdup(b + 4) : NULL;
    free(buf);
    return status;
}

void tu_fake_post(const char *path, const char *body)
{
    int st = tu_fake_http("POST", path, NULL, body, NULL);
    cr_assert(st == 204 || st == 200, "POST %s: %d", path, st);
}

void tu_fake_reset(void)
{
    cr_assert_eq(tu_fake_http("DELETE", "/_fake/faults", NULL, NULL, NULL), 204);
    cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
}

struct json_object *tu_fake_log(void)
{
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", "/_fake/log", NULL, NULL, &body), 200);
    json_object *j = json_tokener_parse(body);
    cr_assert(j && json_object_is_type(j, json_type_array), "log: %s", body);
    free(body);
    return j;
}

const char *tu_json_str(struct json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
           ? json_object_get_string(v) : NULL;
}

int tu_fake_count(struct json_object *log, const char *method, const char *re, double *t,
                  size_t tmax)
{
    regex_t rx;
    char *anchored = tu_strdup_printf("^%s$", re);
    cr_assert_eq(regcomp(&rx, anchored, REG_EXTENDED | REG_NOSUB), 0, "regex %s", anchored);
    free(anchored);
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *tv;
        const char *m = tu_json_str(e, "method"), *p = tu_json_str(e, "path");
        if (!m || !p || strcmp(m, method) != 0 || regexec(&rx, p, 0, NULL, 0))
            continue;
        if (t && (size_t)n < tmax && json_object_object_get_ex(e, "time", &tv))
            t[n] = json_object_get_double(tv);
        n++;
    }
    regfree(&rx);
    return n;
}

int tu_fake_connections(struct json_object *log)
{
    int seen[256], n = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *cv;
        cr_assert(json_object_object_get_ex(e, "conn", &cv), "no conn in %s",
                  json_object_to_json_string(e));
        int c = json_object_get_int(cv), k = 0;
        while (k < n && seen[k] != c)
            k++;
        if (k == n) {
            cr_assert_lt(n, 256);
            seen[n++] = c;
        }
    }
    return n;
}

void tu_fake_assert_warm_execs_share_a_connection(sbx_sandbox *sb, int n, int per_exec)
{
    sbx_result *r = tu_sh(sb, "echo warm", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "warm\n");
    sbx_result_free(r);
    cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
    for (int i = 0; i < n; i++) {
        char cmd[32], want[32];
        snprintf(cmd, sizeof cmd, "echo warm-%d", i);
        snprintf(want, sizeof want, "warm-%d\n", i);
        r = tu_sh(sb, cmd, 30);
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, want);
        tu_assert_stderr(r, "");
        sbx_result_free(r);
    }
    struct json_object *log = tu_fake_log();
    cr_assert_eq((int)json_object_array_length(log), n * per_exec, "%d warm execs: %s", n,
                 json_object_to_json_string(log));
    cr_assert_eq(tu_fake_connections(log), 1, "%d warm execs: %s", n,
                 json_object_to_json_string(log));
    json_object_put(log);
}

void tu_fake_assert_create_answered(sbx_client *client, const char *path_re, int status,
                                    sbx_error_code code)
{
    cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
    char *rule = tu_strdup_printf("{\"method\":\"POST\",\"path\":\"%s\",\"status\":%d}",
                                  path_re, status);
    tu_fake_post("/_fake/faults", rule);
    free(rule);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(client, NULL, &err), "a create answered %d succeeded",
                   status);
    cr_assert_eq(sbx_error_get_code(err), code, "%s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
    char *want = tu_strdup_printf("(HTTP %d)", status);
    cr_assert(strstr(sbx_error_get0_message(err), want) != NULL, "%s",
              sbx_error_get0_message(err));
    free(want);
    sbx_error_free(err);
    struct json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", path_re, NULL, 0), 1);
    json_object_put(log);
}

void tu_assert_bad_seconds_option(const char *backend, const char *key, const char *const *bad,
                                  const char *range)
{
    for (size_t i = 0; bad[i]; i++) {
        char *cfg = tu_strdup_printf("{\"%s\":%s}", key, bad[i]);
        sbx_error *err = NULL;
        sbx_client *c = sbx_client_new_with_config(backend, SBX_PLUGIN_MODE_DEFAULT, cfg, &err);
        cr_assert_null(c, "%s was taken", cfg);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION, "%s: %s", cfg,
                     sbx_error_get0_message(err));
        char *want = tu_strdup_printf("%s client option %s %s is not a number of seconds %s",
                                      backend, key, bad[i], range);
        cr_assert_str_eq(sbx_error_get0_message(err), want);
        cr_assert_str_eq(sbx_error_get0_context(err, "option"), key);
        free(want);
        sbx_error_free(err);
        free(cfg);
    }
}

size_t tu_fake_array_length(const char *path, const char *header, const char *member)
{
    char *body = NULL;
    int status = tu_fake_http("GET", path, header, NULL, &body);
    cr_assert_eq(status, 200, "GET %s: %d %s", path, status, body ? body : "");
    struct json_object *j = json_tokener_parse(body ? body : ""), *a = j;
    if (member && !json_object_object_get_ex(j, member, &a))
        a = NULL;
    cr_assert(a && json_object_is_type(a, json_type_array), "GET %s: %s", path,
              body ? body : "");
    size_t n = json_object_array_length(a);
    json_object_put(j);
    free(body);
    return n;
}

/* The three ids tu_fake_assert_list_owned_pages looks for, and how often
 * each, and any other, was listed. */
typedef struct owned_seen {
    const char *ids[3];
    int found[3];
    int others;
} owned_seen;

static int note_owned(const sbx_owned_sandbox *o, void *ud)
{
    owned_seen *s = ud;
    for (int i = 0; i < 3; i++)
        if (strcmp(o->id, s->ids[i]) == 0) {
            s->found[i]++;
            return 0;
        }
    s->others++;
    return 0;
}

void tu_fake_assert_list_owned_pages(sbx_client *client, sbx_sandbox *sbs[3], const char *list_re)
{
    tu_fake_reset();
    tu_fake_post("/_fake/config", "{\"page_cap\": 1}");
    owned_seen seen = { { sbx_sandbox_get0_id(sbs[0]), sbx_sandbox_get0_id(sbs[1]),
                          sbx_sandbox_get0_id(sbs[2]) }, { 0, 0, 0 }, 0 };
    sbx_error *err = NULL;
    /* It returns how many it found. */
    int listed = sbx_client_list_owned(client, note_owned, &seen, &err);
    cr_assert_eq(listed, 3, "%d listed: %s", listed, err ? sbx_error_get0_message(err) : "");
    struct json_object *log = tu_fake_log();
    int pages = tu_fake_count(log, "GET", list_re, NULL, 0);
    json_object_put(log);
    for (int i = 0; i < 3; i++) {
        sbx_sandbox_destroy(sbs[i], NULL);
        sbx_sandbox_free(sbs[i]);
        sbs[i] = NULL;
    }
    for (int i = 0; i < 3; i++)
        cr_assert_eq(seen.found[i], 1, "sandbox %d found %d times", i, seen.found[i]);
    cr_assert_eq(seen.others, 0);
    cr_assert(pages >= 3, "%d pages", pages);
}

void tu_fake_assert_env_canaries(const char *backend, const char *own)
{
    static const char *const canary[][2] = {
        { "E2B_API_KEY", "e2b_TESTSECRET_0123456789abcdef" },
        { "ANTHROPIC_API_KEY", "sk-ant-TESTSECRET-0000" },
        { "AWS_SECRET_ACCESS_KEY", "TESTSECRETaws0000" },
        { "BESPOKE_CONTROL_PLANE_ADMIN_TOKEN", "TESTSECRETadmin0000" },
        { "SSH_AUTH_SOCK", "/tmp/TESTSECRET-agent.sock" },
    };
    size_t n = sizeof canary / sizeof canary[0];
    char *saved[sizeof canary / sizeof canary[0]];
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(canary[i][0]);
        saved[i] = v ? strdup(v) : NULL;
        if (!own || strcmp(own, canary[i][0]) != 0)
            cr_assert_eq(setenv(canary[i][0], canary[i][1], 1), 0);
    }
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new(backend, &err);
    cr_assert_not_null(c, "client: %s", err ? sbx_error_get0_message(err) : "");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_env(o, "WANTED", "yes", NULL), 0);
    sbx_sandbox *sb = tu_create(c, o);
    sbx_options_free(o);
    sbx_result *r = tu_sh(sb, "env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
                              "tr '\\0' '\\n' < \"$f\"; done 2>/dev/null", 60);
    tu_assert_exit(r, 0);
    size_t len = 0;
    const char *out = sbx_result_get0_stdout(r, &len);
    cr_assert_not_null(memmem(out, len, "WANTED=yes", 10), "WANTED=yes is missing");
    const char *hit = memmem(out, len, "TESTSECRET", 10);
    cr_assert_null(hit, "a canary reached the sandbox: %.*s", (int)(out + len - hit < 80
                                                                    ? out + len - hit : 80),
                   hit);
    cr_assert_null(memmem(out, len, "SSH_AUTH_SOCK", 13), "SSH_AUTH_SOCK is set inside");
    sbx_result_free(r);
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", "/_fake/log", NULL, NULL, &body), 200);
    cr_assert_null(strstr(body, "TESTSECRET"), "a canary reached the provider");
    free(body);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    for (size_t i = 0; i < n; i++) {
        if (saved[i])
            setenv(canary[i][0], saved[i], 1);
        else
            unsetenv(canary[i][0]);
        free(saved[i]);
    }
}

/* ---------------------------------------------------------- CASE-19 */

/* Removes the fake's rules and empties its log, then makes it answer the
 * next @times GETs of @sb's resource (@route and the sandbox's id) 429
 * "slow down", the rule ending with @extra (",\"retry_after\":..." or "").
 * Returns the resource's path (free()). */
static char *answer_reads_429(sbx_sandbox *sb, const char *route, int times, const char *extra)
{
    tu_fake_reset();
    char *path = tu_strdup_printf("%s%s", route, sbx_sandbox_get0_id(sb));
    char *rule = tu_strdup_printf("{\"method\":\"GET\",\"path\":\"^%s$\",\"status\":429,"
                                  "\"times\":%d,\"message\":\"slow down\"%s}", path, times, extra);
    tu_fake_post("/_fake/faults", rule);
    free(rule);
    return path;
}

/* answer_reads_429(@sb, @route, @times, @extra), then is_alive on @sb is 1
 * after exactly @times + 1 GETs of the resource, each retry at least
 * @min_gap seconds after the 429 before it (the fake's times). */
static void assert_reads_retried(sbx_sandbox *sb, const char *route, int times,
                                 const char *extra, double min_gap)
{
    double t[8] = { 0 };
    cr_assert(times >= 1 && times < 8);
    char *path = answer_reads_429(sb, route, times, extra);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_is_alive(sb, &err), 1, "is_alive: %s",
                 err ? sbx_error_get0_message(err) : "");
    struct json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "GET", path, t, (size_t)times + 1), times + 1, "%s",
                 json_object_to_json_string(log));
    json_object_put(log);
    for (int i = 1; i <= times; i++)
        cr_assert(t[i] - t[i - 1] >= min_gap, "retry %d of %d came %.3f s after the 429", i,
                  times, t[i] - t[i - 1]);
    free(path);
}

void tu_fake_assert_retry_after_seconds_waited(sbx_sandbox *sb, const char *route)
{
    assert_reads_retried(sb, route, 2, ",\"retry_after\":\"2\"", 2.0);
}

void tu_fake_assert_retry_after_date_waited(sbx_sandbox *sb, const char *route)
{
    assert_reads_retried(sb, route, 1, ",\"retry_after_date\":3", 2.5);
}

void tu_fake_assert_backoff_without_retry_after(sbx_sandbox *sb, const char *route)
{
    assert_reads_retried(sb, route, 1, "", 0.5);
}

void tu_fake_assert_retry_after_past_the_cap_rate_limited(const char *backend, sbx_sandbox *sb,
                                                          const char *route)
{
    char *path = answer_reads_429(sb, route, 1, ",\"retry_after\":\"3600\"");
    sbx_error *err = NULL;
    double t0 = tu_now();
    cr_assert_eq(sbx_sandbox_is_alive(sb, &err), -1);
    double dt = tu_now() - t0;
    cr_assert(dt < 30.0, "is_alive failed after %.2f s: it waited", dt);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_RATE_LIMITED, "%s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "get the sandbox: slow down (HTTP 429; the provider asks to wait 3600 s)");
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    cr_assert_str_eq(sbx_error_get0_backend(err), backend);
    cr_assert_str_eq(sbx_error_get0_op(err), "is_alive");
    cr_assert_str_eq(sbx_error_get0_context(err, "retry_after_s"), "3600");
    cr_assert_str_eq(sbx_error_get0_context(err, "http_status"), "429");
    sbx_error_free(err);
    struct json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "GET", path, NULL, 0), 1, "%s",
                 json_object_to_json_string(log));
    json_object_put(log);
    free(path);
}

/* ---------------------------------------------------------- CASE-36 */

void tu_fake_assert_credential_scrubbed(const char *backend, const char *key_var,
                                        sbx_client *client, sbx_sandbox *sb,
                                        const char *create_path, const char *key_header)
{
    const char *key = getenv(key_var);
    cr_assert(key && strlen(key) >= 8, "%s holds no key of 8 characters or more", key_var);
    cr_assert_str_eq(sbx_client_get0_backend(client), backend);
    tu_fake_reset();
    char *rule = tu_strdup_printf("{\"method\":\"POST\",\"path\":\"^%s$\",\"status\":401,"
                                  "\"message\":\"invalid key %s\"}", create_path, key);
    tu_fake_post("/_fake/faults", rule);
    free(rule);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(client, NULL, &err), "the create succeeded");
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_AUTHENTICATION, "%s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "create the sandbox: invalid key [redacted] (HTTP 401)");
    cr_assert_str_eq(sbx_error_get0_backend(err), backend);
    cr_assert_str_eq(sbx_error_get0_op(err), "create");
    char *s = sbx_error_to_string(err);
    cr_assert(strstr(s, key) == NULL, "the error shows the key: %s", s);
    for (size_t i = 0; i < sbx_error_get_context_count(err); i++) {
        const char *k, *v;
        cr_assert_eq(sbx_error_get0_context_at(err, i, &k, &v), 0);
        cr_assert(strstr(v, key) == NULL, "context %s shows the key", k);
    }
    free(s);
    sbx_error_free(err);
    err = NULL;
    char *state = sbx_sandbox_session_state(sb, &err);
    cr_assert_not_null(state, "session state: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert(strstr(state, key) == NULL, "the session state holds the key: %s", state);
    free(state);
    sbx_result *r = tu_sh(sb, "echo fine", 10);
    tu_assert_stdout(r, "fine\n");
    sbx_result_free(r);
    struct json_object *log = tu_fake_log();
    const char *text = json_object_to_json_string(log);
    cr_assert(strstr(text, key) == NULL, "the fake's log holds the key");
    size_t n = json_object_array_length(log);
    cr_assert(n >= 2, "%zu requests: %s", n, text);
    for (size_t i = 0; i < n; i++)
        cr_assert_str_eq(tu_json_str(json_object_array_get_idx(log, i), "auth"),
                         "Bearer <redacted>", "request %zu of %s", i, text);
    struct json_object *first = json_object_array_get_idx(log, 0), *headers;
    cr_assert_str_eq(tu_json_str(first, "method"), "POST");
    cr_assert_str_eq(tu_json_str(first, "path"), create_path);
    cr_assert(json_object_object_get_ex(first, "headers", &headers));
    const char *sent = NULL;
    json_object_object_foreach(headers, hk, hv) {
        if (strcasecmp(hk, key_header) == 0)
            sent = json_object_get_string(hv);
    }
    cr_assert_str_eq(sent ? sent : "(none)",
                     strcasecmp(key_header, "Authorization") == 0 ? "Bearer <redacted>"
                                                                  : "<redacted>",
                     "the key was not sent in %s", key_header);
    json_object_put(log);
}

/* ---------------------------------------------------------- the idle reaper */

static pid_t g_reaper = -1;     /* the idle reaper, or -1 */
static int g_reaper_err = -1;   /* the read end of its stderr */

/* Starts the idle reaper in front of 127.0.0.1:@target, closing a
 * connection after @idle seconds without a byte: its port. Stopped by
 * tu_reaper_stop() (a suite's teardown too). */
int tu_reaper_start(int target, int idle)
{
    int out[2], err[2];
    cr_assert_eq(pipe(out), 0);
    cr_assert_eq(pipe(err), 0);
    char tport[16], tidle[16];
    snprintf(tport, sizeof tport, "%d", target);
    snprintf(tidle, sizeof tidle, "%d", idle);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]);
        close(out[1]);
        close(err[0]);
        close(err[1]);
        execl("/usr/bin/python3", "python3", SBX_SOURCE_DIR "/tests/fakes/idlereaper.py", tport,
              tidle, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    g_reaper = pid;
    g_reaper_err = err[0];
    char line[64];
    size_t n = 0;
    while (n < sizeof line - 1) {
        ssize_t k = read(out[0], line + n, 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0 || line[n] == '\n')
            break;
        n++;
    }
    line[n] = '\0';
    close(out[0]);
    int port = 0;
    cr_assert_eq(sscanf(line, "PORT %d", &port), 1, "the idle reaper said \"%s\"", line);
    return port;
}

/* Stops the idle reaper by its pid: the connections it reaped (its
 * "REAPED n" lines); 0 when none runs. */
int tu_reaper_stop(void)
{
    if (g_reaper <= 0)
        return 0;
    kill(g_reaper, SIGTERM);
    int st;
    while (waitpid(g_reaper, &st, 0) < 0 && errno == EINTR)
        ;
    g_reaper = -1;
    char buf[4096];
    size_t n = 0;
    for (;;) {
        ssize_t k = read(g_reaper_err, buf + n, sizeof buf - 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0 || (n += (size_t)k) == sizeof buf - 1)
            break;
    }
    buf[n] = '\0';
    close(g_reaper_err);
    g_reaper_err = -1;
    int reaped = 0;
    for (const char *p = buf; (p = strstr(p, "REAPED ")); p += 7)
        reaped++;
    return reaped;
}

char *tu_fake_ints(const char *path, const char *header, const char *key)
{
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", path, header, NULL, &body), 200, "GET %s: %s", path,
                 body ? body : "");
    json_object *j = json_tokener_parse(body), *a;
    cr_assert(j && json_object_object_get_ex(j, key, &a)
              && json_object_is_type(a, json_type_array), "no array %s in %s", key, body);
    char out[1024] = "";
    for (size_t i = 0; i < json_object_array_length(a); i++)
        snprintf(out + strlen(out), sizeof(out) - strlen(out), i ? ",%d" : "%d",
                 json_object_get_int(json_object_array_get_idx(a, i)));
    json_object_put(j);
    free(body);
    return strdup(out);
}

sbx_sandbox *tu_create_with_ports(sbx_client *client, const uint16_t *ports, size_t n)
{
    sbx_options *o = sbx_options_new();
    cr_assert_not_null(o);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(sbx_options_add_port(o, ports[i], NULL), 0, "add_port %u", ports[i]);
    sbx_sandbox *sb = tu_create(client, o);
    sbx_options_free(o);
    return sb;
}

void tu_assert_port_url(sbx_sandbox *sb, unsigned port, const char *want)
{
    sbx_error *err = NULL;
    char *got = sbx_sandbox_resolve_port(sb, port, &err);
    assert_no_error(err, "sbx_sandbox_resolve_port");
    cr_assert_not_null(got, "resolve_port %u returned NULL without an error", port);
    cr_assert_str_eq(got, want, "port %u", port);
    free(got);
}

void tu_assert_port_not_exposed(sbx_sandbox *sb, const char *backend, unsigned port)
{
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_resolve_port(sb, port, &err), "port %u resolved", port);
    cr_assert_not_null(err);
    char *msg = tu_strdup_printf("%s sandbox %s: port %u is not exposed", backend,
                                 sbx_sandbox_get0_id(sb), port);
    char num[16];
    snprintf(num, sizeof num, "%u", port);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND, "%s", sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err), msg);
    cr_assert_str_eq(sbx_error_get0_context(err, "port"), num);
    free(msg);
    sbx_error_free(err);
}

void tu_assert_ports(sbx_sandbox *sb, const char *want)
{
    sbx_error *err = NULL;
    uint16_t *list = NULL;
    size_t n = 0;
    cr_assert_eq(sbx_sandbox_list_ports(sb, &list, &n, &err), 0, "list_ports: %s",
                 err ? sbx_error_get0_message(err) : "");
    char got[1024] = "";
    for (size_t i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), i ? ",%u" : "%u",
                 (unsigned)list[i]);
    free(list);
    cr_assert_str_eq(got, want);
}

void tu_debug_log_start(tu_debug_log *l)
{
    snprintf(l->path, sizeof l->path, "/tmp/sbx-debug-log-XXXXXX");
    l->fd = mkstemp(l->path);
    cr_assert_geq(l->fd, 0, "mkstemp: %s", strerror(errno));
    /* Read through the descriptor only: gone from /tmp at once, so a test
     * that fails before tu_debug_log_stop() leaves nothing behind. */
    unlink(l->path);
    fflush(stderr);
    l->saved = dup(2);
    cr_assert_geq(l->saved, 0);
    cr_assert_eq(dup2(l->fd, 2), 2);
    cr_assert_eq(setenv("SBX_DEBUG", "1", 1), 0);
}

char *tu_debug_log_stop(tu_debug_log *l)
{
    fflush(stderr);
    cr_assert_eq(dup2(l->saved, 2), 2);
    close(l->saved);
    unsetenv("SBX_DEBUG");
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    cr_assert_eq(lseek(l->fd, 0, SEEK_SET), 0);
    for (;;) {
        if (n + 4096 > cap) {
            buf = realloc(buf, cap *= 2);
            cr_assert_not_null(buf);
        }
        ssize_t r = read(l->fd, buf + n, cap - n - 1);
        cr_assert(r >= 0, "read the debug log: %s", strerror(errno));
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    close(l->fd);
    return buf;
}

/* The slots the plugin host was called with since byte @from of the
 * captured debug log @l ("plugin host: call SLOT" lines), comma-separated
 * in their order; *@from moves to the log's end. */
char *tu_host_calls_since(const tu_debug_log *l, off_t *from)
{
    static const char tag[] = "plugin host: call ";
    struct stat st;
    cr_assert_eq(fstat(l->fd, &st), 0);
    size_t n = (size_t)(st.st_size - *from);
    char *buf = malloc(n + 1), *out = malloc(n + 1);
    cr_assert(buf && out);
    cr_assert_eq(pread(l->fd, buf, n, *from), (ssize_t)n);
    buf[n] = '\0';
    out[0] = '\0';
    *from = st.st_size;
    for (char *line = buf, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        cr_assert_not_null(nl, "a partial log line: %s", line);
        *nl = '\0';
        char *at = strstr(line, tag);
        if (!at)
            continue;
        if (out[0])
            strcat(out, ",");
        strcat(out, at + strlen(tag));
    }
    free(buf);
    return out;
}

/* ------------------------------------------------------------ live output */

typedef struct live_seen {
    const char *marker;     /* the file to make, as seen from this host */
    char out[256];          /* stdout as the callback saw it */
    size_t len;
    int marker_made;
} live_seen;

/* On the first line of stdout, makes the file the command waits for. */
static void on_live(sbx_stream stream, const void *data, size_t len, void *ud)
{
    live_seen *s = ud;
    if (stream != SBX_STREAM_STDOUT)
        return;
    cr_assert_lt(s->len + len, sizeof s->out);
    memcpy(s->out + s->len, data, len);
    s->len += len;
    s->out[s->len] = '\0';
    if (!s->marker_made && strcmp(s->out, "first\n") == 0) {
        FILE *f = fopen(s->marker, "w");
        cr_assert_not_null(f, "%s", s->marker);
        fclose(f);
        s->marker_made = 1;
    }
}

void tu_assert_output_is_live(sbx_sandbox *sb, const char *marker_on_host,
                              const char *marker_in_sandbox)
{
    live_seen seen = { .marker = marker_on_host };
    unlink(marker_on_host);
    char *shell = tu_strdup_printf("echo first; i=0; while [ ! -e %s ] && [ $i -lt 200 ]; do "
                                   "sleep 0.05; i=$((i+1)); done; if [ -e %s ]; then echo "
                                   "second; else echo never; fi; echo done >&2; exit 7",
                                   marker_in_sandbox, marker_in_sandbox);
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.shell = shell;
    rq.timeout_secs = 30;
    rq.on_output = on_live;
    rq.user_data = &seen;
    sbx_result *r = tu_exec(sb, &rq);
    unlink(marker_on_host);
    free(shell);
    cr_assert_eq(seen.marker_made, 1);
    tu_assert_exit(r, 7);
    tu_assert_stdout(r, "first\nsecond\n");
    tu_assert_stderr(r, "done\n");
    cr_assert_str_eq(seen.out, "first\nsecond\n");
    sbx_result_free(r);
}

unsigned tu_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(a);

    cr_assert_geq(fd, 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* ------------------------------------------------------------ files */

static const char case17_sha[] =
    "fbbab289f7f94b25736c58be46a994c441fd02552cc6022352e3d86d2fab7c83";

/* The whole host file @path (new, free()); its length in *@len. */
static char *slurp_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert(fd >= 0, "open %s: %s", path, strerror(errno));
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    char *buf = malloc((size_t)st.st_size + 1);
    cr_assert_not_null(buf);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        cr_assert(n > 0, "read %s", path);
        got += (size_t)n;
    }
    close(fd);
    *len = got;
    return buf;
}

/* Runs @script in @sb (30 s) and asserts exit 0 and stdout @want. */
static void sh_expect_in(sbx_sandbox *sb, const char *script, const char *want)
{
    sbx_result *r = tu_sh(sb, script, 30);
    tu_assert_stdout(r, want);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
}

/* The commands' $HOME in @sb (new string, no newline). */
static char *sandbox_home(sbx_sandbox *sb)
{
    sbx_result *r = tu_sh(sb, "printf '%s' \"$HOME\"", 30);
    tu_assert_exit(r, 0);
    char *h = strdup(sbx_result_get0_stdout(r, NULL));
    sbx_result_free(r);
    cr_assert_not_null(h);
    return h;
}

/* @err is the refusal of a part that is not UTF-8 text (@what, then
 * " is not valid UTF-8: the provider's API (@api) cannot carry it"), op
 * @op, context @key=@val (@key NULL: none looked at); frees it. */
static void assert_not_text(sbx_error *err, const char *backend, const char *api,
                            const char *op, const char *what, const char *key,
                            const char *val)
{
    char *msg = tu_strdup_printf("%s is not valid UTF-8: the provider's API (%s) cannot carry "
                                 "it", what, api);
    cr_assert_not_null(err, "%s: no error", msg);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT, "%s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err), msg);
    cr_assert_str_eq(sbx_error_get0_backend(err), backend);
    cr_assert_str_eq(sbx_error_get0_op(err), op);
    if (key)
        cr_assert_str_eq(sbx_error_get0_context(err, key), val);
    sbx_error_free(err);
    free(msg);
}

void tu_json_text_refused(const char *backend, sbx_sandbox *sb, unsigned parts)
{
    static const char *const argv[] = { "printf", "%s", "\xff\xfe", NULL };
    static const char *const env[] = { "C=\xff\xfe", NULL };
    static const struct {
        const char *const *argv;
        const char *shell;
        const char *const *env;
        const char *cwd;
        const char *what, *key, *val;
    } cases[] = {
        { argv, NULL, NULL, NULL, "argument 2", "argument", "2" },
        { NULL, "printf '%s' '\xff'", NULL, NULL, "the shell command", NULL, NULL },
        { NULL, "echo hi", env, NULL, "environment variable C", "env_name", "C" },
        { NULL, "echo hi", NULL, "/tmp/\xff", "the working directory", NULL, NULL },
    };
    const char *api = parts & TU_TEXT_PROTOBUF ? "protobuf" : "JSON";
    tu_fake_reset();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].env && (parts & TU_TEXT_ENV_AS_BYTES))
            continue;
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.argv = cases[i].argv;
        req.shell = cases[i].shell;
        req.env = cases[i].env;
        req.cwd = cases[i].cwd;
        assert_not_text(tu_exec_fail(sb, &req, SBX_ERROR_INVALID_ARGUMENT), backend, api, "exec",
                        cases[i].what, cases[i].key, cases[i].val);
    }
    sbx_error *err = NULL;
    if (parts & TU_TEXT_WRITE) {
        cr_assert_eq(sbx_sandbox_write_file(sb, "/tmp/\xff\xfe", "x", 1, &err), -1);
        assert_not_text(err, backend, api, "write_file", "the path", NULL, NULL);
    }
    if (parts & TU_TEXT_READ) {
        char *data = NULL;
        size_t len = 0;
        err = NULL;
        cr_assert_eq(sbx_sandbox_read_file(sb, "/tmp/\xff\xfe", &data, &len, &err), -1);
        assert_not_text(err, backend, api, "read_file", "the path", NULL, NULL);
    }
    if (parts & TU_TEXT_LIST) {
        sbx_file_info **list = NULL;
        size_t n = 0;
        err = NULL;
        cr_assert_eq(sbx_sandbox_list_files(sb, "/tmp/\xff\xfe", &list, &n, &err), -1);
        assert_not_text(err, backend, api, "list_files", "the path", NULL, NULL);
    }
    struct json_object *log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 0, "requests were sent: %s",
                 json_object_to_json_string(log));
    json_object_put(log);
    if (parts & TU_TEXT_ENV_AS_BYTES) {
        /* The value goes as bytes: it arrives as it was. */
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.shell = "printf '%s' \"$C\"";
        req.env = env;
        sbx_result *r = tu_exec(sb, &req);
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, "\xff\xfe");
        sbx_result_free(r);
    }
    sbx_result *r = tu_sh(sb, "test -e \"$(printf '/tmp/\\377\\376')\" && echo left || echo none",
                          30);
    tu_assert_stdout(r, "none\n");
    sbx_result_free(r);
}

void tu_files_case17(sbx_sandbox *sb)
{
    char *data = malloc(1048576), hex[65], all[256];
    cr_assert_not_null(data);
    for (size_t i = 0; i < 1048576; i++)
        data[i] = (char)(i & 0xff);
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    tu_sha256_hex(data, 1048576, hex);
    cr_assert_str_eq(hex, case17_sha);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(sb, "/work/bin.dat", data, 1048576, &err), 0,
                 "write_file: %s", err ? sbx_error_get0_message(err) : "");
    char *got = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file(sb, "/work/bin.dat", &got, &len, &err), 0,
                 "read_file: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(len, 1048576, "read %zu bytes", len);
    tu_sha256_hex(got, len, hex);
    cr_assert_str_eq(hex, case17_sha);
    tu_assert_bytes("read_file", got, len, data, 1048576);
    free(got);
    char *want = tu_strdup_printf("%s  /work/bin.dat\n", case17_sha);
    sh_expect_in(sb, "sha256sum /work/bin.dat", want);
    free(want);

    /* A host tree through upload_dir and back through download_dir. */
    char *up = tu_mkdtemp("sbx-files-up"), *down = tu_mkdtemp("sbx-files-down");
    char *p = tu_strdup_printf("%s/all.bin", up);
    tu_write_file(p, all, 256, 0644);
    free(p);
    p = tu_strdup_printf("%s/big.bin", up);
    tu_write_file(p, data, 1048576, 0644);
    free(p);
    p = tu_strdup_printf("%s/sub", up);
    cr_assert_eq(mkdir(p, 0755), 0);
    free(p);
    p = tu_strdup_printf("%s/sub/empty", up);
    tu_write_file(p, "", 0, 0644);
    free(p);
    cr_assert_eq(sbx_sandbox_upload_dir(sb, up, "/work/up", &err), 4, "upload_dir: %s",
                 err ? sbx_error_get0_message(err) : "");
    char all_hex[65];
    tu_sha256_hex(all, 256, all_hex);
    want = tu_strdup_printf("%s  /work/up/all.bin\n%s  /work/up/big.bin\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
                            "  /work/up/sub/empty\n", all_hex, case17_sha);
    sh_expect_in(sb, "sha256sum /work/up/all.bin /work/up/big.bin /work/up/sub/empty", want);
    free(want);
    char *dst = tu_strdup_printf("%s/back", down);
    cr_assert_eq(sbx_sandbox_download_dir(sb, "/work/up", dst, &err), 4, "download_dir: %s",
                 err ? sbx_error_get0_message(err) : "");
    static const char *const names[] = { "all.bin", "big.bin", "sub/empty" };
    const char *const wants[] = { all, data, "" };
    const size_t lens[] = { 256, 1048576, 0 };
    for (int i = 0; i < 3; i++) {
        p = tu_strdup_printf("%s/%s", dst, names[i]);
        got = slurp_file(p, &len);
        tu_assert_bytes(names[i], got, len, wants[i], lens[i]);
        free(got);
        free(p);
    }
    cr_assert_eq(tu_count_entries(dst), 3);
    free(dst);
    tu_rmtree(up);
    tu_rmtree(down);
    free(up);
    free(down);
    free(data);
}

void tu_files_list_exact(sbx_sandbox *sb)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(sb, "/work/ls/b.txt", "bb", 2, &err), 0);
    cr_assert_eq(sbx_sandbox_write_file(sb, "/work/ls/a.txt", "a", 1, &err), 0);
    cr_assert_eq(sbx_sandbox_write_file(sb, "/work/ls/d/x", "xyz", 3, &err), 0);
    sbx_file_info **list = NULL;
    size_t n = 0;
    cr_assert_eq(sbx_sandbox_list_files(sb, "/work/ls", &list, &n, &err), 0, "list_files: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(n, 3, "%zu entries", n);
    static const char *const names[] = { "a.txt", "b.txt", "d" };
    static const char *const paths[] = { "/work/ls/a.txt", "/work/ls/b.txt", "/work/ls/d" };
    for (size_t i = 0; i < 3; i++) {
        cr_assert_str_eq(sbx_file_info_get0_name(list[i]), names[i]);
        cr_assert_str_eq(sbx_file_info_get0_path(list[i]), paths[i]);
        cr_assert_eq(sbx_file_info_is_dir(list[i]), i == 2, "%s", names[i]);
        if (i < 2)
            cr_assert_eq(sbx_file_info_get_size(list[i]), (int64_t)(i + 1), "%s: %lld",
                         names[i], (long long)sbx_file_info_get_size(list[i]));
    }
    sbx_file_info_list_free(list, n);
    /* An empty directory lists nothing; a missing one is not_found. */
    sh_expect_in(sb, "mkdir -p /work/ls/empty && echo ok", "ok\n");
    cr_assert_eq(sbx_sandbox_list_files(sb, "/work/ls/empty", &list, &n, &err), 0);
    cr_assert_eq(n, 0);
    sbx_file_info_list_free(list, n);
    cr_assert_eq(sbx_sandbox_list_files(sb, "/work/ls/nope", &list, &n, &err), -1);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), "/work/ls/nope");
    cr_assert_null(list);
    cr_assert_eq(n, 0);
    sbx_error_free(err);
    /* A missing directory says nothing of the sandbox: it works on. */
    sh_expect_in(sb, "echo alive", "alive\n");
}

void tu_files_home_is_writable(sbx_sandbox *sb)
{
    char *home = sandbox_home(sb);
    cr_assert(home[0] == '/' && strcmp(home, "/") != 0, "HOME=\"%s\"", home);
    sh_expect_in(sb, "cd \"$HOME\" && [ -d . ] && [ -w . ] && echo probe > .sbx-home-probe && "
                     "cat .sbx-home-probe && rm .sbx-home-probe && "
                     "[ \"$(pwd -P)\" = \"$(cd \"$HOME\" && pwd -P)\" ] && echo ok",
                 "probe\nok\n");
    char *f = tu_strdup_printf("%s/.sbx-home-file", home);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(sb, f, "home\n", 5, &err), 0, "write_file %s: %s", f,
                 err ? sbx_error_get0_message(err) : "");
    sh_expect_in(sb, "cat \"$HOME/.sbx-home-file\" && rm \"$HOME/.sbx-home-file\" && echo gone",
                 "home\ngone\n");
    free(f);
    free(home);
}

void tu_files_case45(sbx_sandbox *sb)
{
    if (geteuid() != 0)
        cr_skip_test("CASE-45 gives a host tree an owner the sandbox lacks (chown 4242): "
                     "needs root, this process is uid %d", (int)geteuid());
    sbx_result *r = tu_sh(sb, "printf '%s:%s\\n' \"$(id -u)\" \"$(id -g)\"; "
                              "stat -c '%u:%g %a' \"$HOME\"", 30);
    tu_assert_exit(r, 0);
    char ug[64] = "", before[128] = "";
    cr_assert_eq(sscanf(sbx_result_get0_stdout(r, NULL), "%63[^\n]\n%127[^\n]", ug, before), 2);
    sbx_result_free(r);
    char *home = sandbox_home(sb);

    /* P: u.txt, proj/a.txt, proj/sub/b.txt, all owned by 4242:4242. */
    char *P = tu_mkdtemp("sbx-case45"), *Q = tu_mkdtemp("sbx-case45-q");
    static const char *const made[] = { "", "/u.txt", "/proj", "/proj/a.txt", "/proj/sub",
                                        "/proj/sub/b.txt" };
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++) {
        char *p = tu_strdup_printf("%s%s", P, made[i]);
        if (strstr(made[i], ".txt")) {
            char c = strstr(made[i], "u.txt") ? 'u' : strstr(made[i], "a.txt") ? 'a' : 'b';
            char body[2] = { c, '\n' };
            tu_write_file(p, body, 2, 0644);
        } else if (made[i][0]) {
            cr_assert_eq(mkdir(p, 0755), 0);
        }
        cr_assert_eq(lchown(p, 4242, 4242), 0, "chown %s", p);
        free(p);
    }
    sbx_error *err = NULL;
    char *w = tu_strdup_printf("%s/w.txt", home), *u = tu_strdup_printf("%s/u.txt", home);
    char *pu = tu_strdup_printf("%s/u.txt", P), *pp = tu_strdup_printf("%s/proj", P);
    char *hp = tu_strdup_printf("%s/proj", home), *x = tu_strdup_printf("%s/newdir/deep/x.txt", home);
    cr_assert_eq(sbx_sandbox_write_file(sb, w, "w\n", 2, &err), 0, "write_file: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_upload_file(sb, pu, u, &err), 0, "upload_file: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_upload_dir(sb, pp, hp, &err), 3, "upload_dir: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_write_file(sb, x, "x\n", 2, &err), 0);
    cr_assert_eq(sbx_sandbox_upload_dir(sb, pp, home, &err), 3, "upload_dir into $HOME: %s",
                 err ? sbx_error_get0_message(err) : "");

    char uid[32];
    snprintf(uid, sizeof uid, "%.*s", (int)strcspn(ug, ":"), ug);
    char *want = tu_strdup_printf(
        "%s\n%s w.txt\n%s u.txt\n%s proj\n%s proj/a.txt\n%s proj/sub\n%s proj/sub/b.txt\n"
        "%s newdir\n%s newdir/deep\n%s newdir/deep/x.txt\n%s .\nappend-ok\ncreate-ok\nrm-ok\n",
        uid, ug, ug, ug, ug, ug, ug, ug, ug, ug, ug);
    sh_expect_in(sb, "id -u; cd \"$HOME\" && stat -c '%u:%g %n' w.txt u.txt proj proj/a.txt "
                     "proj/sub proj/sub/b.txt newdir newdir/deep newdir/deep/x.txt .; "
                     "echo more >> u.txt && echo append-ok; touch proj/sub/new && "
                     "echo create-ok; rm newdir/deep/x.txt && echo rm-ok", want);
    free(want);
    /* Step 5 left $HOME itself as it was. */
    want = tu_strdup_printf("%s\n", before);
    sh_expect_in(sb, "stat -c '%u:%g %a' \"$HOME\"", want);
    free(want);
    /* Step 7: what download_dir makes is this process's. */
    char *q = tu_strdup_printf("%s/proj", Q);
    cr_assert_eq(sbx_sandbox_download_dir(sb, hp, q, &err), 4, "download_dir: %s",
                 err ? sbx_error_get0_message(err) : "");
    static const char *const got[] = { "", "/a.txt", "/sub", "/sub/b.txt", "/sub/new" };
    for (size_t i = 0; i < sizeof got / sizeof got[0]; i++) {
        char *p = tu_strdup_printf("%s%s", q, got[i]);
        struct stat st;
        cr_assert_eq(lstat(p, &st), 0, "%s", p);
        cr_assert_eq(st.st_uid, geteuid(), "%s: uid %d", p, (int)st.st_uid);
        cr_assert_eq(st.st_gid, getegid(), "%s: gid %d", p, (int)st.st_gid);
        free(p);
    }
    free(q);
    tu_rmtree(P);
    tu_rmtree(Q);
    free(P);
    free(Q);
    free(w);
    free(u);
    free(pu);
    free(pp);
    free(hp);
    free(x);
    free(home);
}

void tu_files_case46(sbx_sandbox *sb)
{
    sh_expect_in(sb, "mkdir -p /work/p/sub && rm -f /tmp/sbx-m1 /tmp/sbx-m2 && echo ok", "ok\n");
    static const struct {
        const char *cmd, *out;
        int exit_code;
    } c[] = {
        { "true & wait; pwd", "/work/p\n", 0 },
        { "sleep 0 &\npwd", "/work/p\n", 0 },
        { "pwd # trailing comment", "/work/p\n", 0 },
        { "pwd; sleep 0 &", "/work/p\n", 0 },
        { "cat <<EOF\nhi\nEOF", "hi\n", 0 },
        { "cd sub && pwd", "/work/p/sub\n", 0 },
        { "pwd; exit 7", "/work/p\n", 7 },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.shell = c[i].cmd;
        req.cwd = "/work/p";
        req.timeout_secs = 30;
        sbx_result *r = tu_exec(sb, &req);
        cr_assert_eq(sbx_result_get_exit_code(r), c[i].exit_code, "C%zu: exit %d", i + 1,
                     sbx_result_get_exit_code(r));
        tu_assert_stdout(r, c[i].out);
        sbx_result_free(r);
    }
    /* C8: a missing directory: not_found naming it, and no part ran. */
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "true & touch /tmp/sbx-m1; touch /tmp/sbx-m2";
    req.cwd = "/work/missing";
    req.timeout_secs = 30;
    sbx_error *err = tu_exec_fail(sb, &req, SBX_ERROR_NOT_FOUND);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "/work/missing", NULL);
    sbx_error_free(err);
    sh_expect_in(sb, "sleep 0.5; for m in 1 2; do test -e /tmp/sbx-m$m && echo m$m; done; "
                     "echo none", "none\n");
}
