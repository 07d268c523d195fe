/*
 * bwrap.c — what libsbx-bubblewrap.so adds to the local backend.
 *
 * libsbx-bubblewrap.so is local.c, files.c and this file built with
 * SBX_LOCAL_BUBBLEWRAP. A sandbox is the same meta directory and
 * sbx-supervisor as a local one, but the supervisor runs as pid 1 of one
 * bwrap instance started at create:
 *
 *     sbx-supervisor --launch [--cgroup-procs=F]... --keep=META
 *         [--spare-id=ID] [--remove=ROOT/tmp] [--lent=ROOT] --seccomp-fd=4
 *         [--user=65534:65534] [--overlay=META] -- BWRAP
 *         --unshare-user [--uid UID --gid GID] --disable-userns
 *         --cap-drop ALL --seccomp 4
 *         --unshare-pid --unshare-ipc --unshare-uts
 *         [--unshare-net] --new-session --as-pid-1 --hostname sbx
 *         --bind ROOT|META/mnt / (a warm sandbox: --args 5)
 *         --ro-bind SRC/usr /usr --ro-bind SRC/etc /etc
 *         (bin, sbin, lib, lib32, lib64, libx32: --symlink where SRC has a
 *          symlink, --ro-bind where it has a directory)
 *         --proc /proc
 *         --ro-bind /proc/K /proc/K (sys, sysrq-trigger, irq, bus, fs)
 *         --ro-bind /dev/null /proc/F (kcore, keys, timer_list, sched_debug,
 *                                      latency_stats)
 *         --dev /dev
 *         --ro-bind SUPERVISOR /.sbx/sbx-supervisor
 *         --chdir / --clearenv
 *         -- /.sbx/sbx-supervisor --control-fd=3 --init [--spare=ID]
 *
 * SRC is "/" (the host) or the root filesystem directory named by `image`.
 * The launcher forks a keeper and exits once bwrap runs; the keeper forks
 * the process that joins the sandbox's cgroups, compiles the seccomp
 * filter (seccomp.c) onto descriptor 4, changes user (below) and execs
 * bwrap, so the sandbox outlives the creating process and the library
 * waits for nothing but the launcher. The keeper (the library's user,
 * outside every namespace) waits for bwrap and, when it ended other than
 * after DESTROY (expiry, owners gone, its init killed), removes META, the
 * tmp directory create made in a caller's workdir (--remove) and the
 * cgroups; it finds META by its inode under the name it has then (as made,
 * renamed by the create that claimed a warm sandbox, or its trash name).
 * Destroy of a sandbox with its own root and no cgroups answers at
 * DESTROYED (every process but its init reaped, idle reapers sent
 * SIGKILL; the init's exit, next, ends its pid namespace), with META
 * renamed to its trash name (".sbx-trash-" ID) for that keeper to remove
 * once bwrap has ended and the library's lock on META is free; any other
 * waits for the init's exit and removes the cgroups and META itself.
 *
 * A warm sandbox (local.c, bw_spare_make): after a create of the plain
 * configuration (no image, limits, user, root_dir, workdir or
 * backend_options, the host's network), the client starts the next ones
 * ahead (two ready at most, the oldest taken first) with this same
 * command line (SBX_LOCAL_WARM=0: never), META being
 * BASE/.sbx-spare-XXXXXX, its socket bound and its init waiting for
 * CONFIG (`--init --spare=ID`); the next plain create renames META to
 * the sandbox's (ID, sbx-bwrap-XXXXXX) and hands the socket over with
 * CONFIG. The overlay and bwrap's binds hold the directories, not their
 * names, so the rename changes nothing inside. No command line,
 * descriptor or environment of its processes names META while it waits
 * (the launcher's `--spare-id=ID` shows the ID in place of the paths and
 * gives bwrap its "--bind META/mnt /" on descriptor 5, `--args 5`; no
 * start-up log). It ends when its control socket closes: client_free, or
 * the process holding the client gone (SIGKILL included), after which
 * its keeper removes META; one left without a keeper too is removed by
 * the next client's sweep or `sbx gc` (nothing listens on its socket).
 * The supervisor's
 * socket is META/sock on the host, never in view: the library binds it and
 * hands it over with CONFIG (proto.h), so no process of the sandbox can
 * reach, rename or replace it. Nothing
 * of the host's /run, /var, /home, /root, /tmp or /sys is visible; /tmp is
 * ROOT/tmp, private to the sandbox. Limits (cpu, memory_mb) go through
 * cgroup v1 (memory, cpu controllers) or v2 directories "sbx-ID" the
 * library creates where it may (usually as root); destroy removes them.
 *
 * Privileges. Nothing in a sandbox is privileged on the host:
 *   - Its processes have no capabilities (CapInh, CapPrm, CapEff, CapBnd
 *     and CapAmb all 0), may not make user namespaces (--disable-userns,
 *     and the seccomp filter), and the filter refuses mounts, keyrings,
 *     bpf, ptrace and the other calls seccomp.c lists.
 *   - Its uid is never host root. When the library runs as another user,
 *     bwrap runs as that user and the sandbox's uid is the library's. When
 *     the library runs as root, the launcher becomes uid/gid 65534
 *     (BWRAP_SANDBOX_UID/GID, "nobody") before it execs bwrap, and the
 *     sandbox runs as 65534 inside and out: bwrap_prepare_dirs makes META
 *     mode 0711 and gives ROOT and ROOT/tmp to 65534; a caller's
 *     workdir is lent to 65534 for the sandbox's life (its owner is
 *     recorded in META/workdir-owner and given back at destroy). The
 *     temporary directory, a caller's workdir, the supervisor program, an
 *     image and ro_binds paths must then be searchable by 65534 (checked
 *     at create, with a configuration error naming the directory that is
 *     not). write_file and upload_dir run with 65534 as the calling
 *     thread's filesystem uid and gid, so what they create belongs to the
 *     sandbox; the other file calls and destroy run as root, and destroy
 *     removes everything the sandbox made.
 *   - A create-time user (sbx_options_set_user) is the one uid and gid of
 *     the sandbox's user namespace (--uid/--gid; a name resolved in
 *     SRC/etc/passwd by bwrap_resolve_user): inside, commands and what the
 *     file calls write are that user's; outside nothing changes (the
 *     namespace maps it to the uid above). Without one the sandbox's uid
 *     inside is its uid outside.
 *   - /proc/sys and the other host-global knobs of /proc are read-only or
 *     hidden; /sys is absent.
 *   - /proc names no host path of an owned root: the launcher mounts, in
 *     a user and mount namespace of its own that bwrap inherits, an overlay
 *     at META/mnt whose upper layer is META/root over an empty META/lower
 *     (work directory META/work), its layers named relative to META; bwrap
 *     binds META/mnt as "/", so mountinfo shows "/" as its root and
 *     "lowerdir=lower,upperdir=root,workdir=work" (a bind mount shows its
 *     source's path within its filesystem). The file calls reach such a
 *     root through the sandbox's own view, /proc/PID/root of its pid 1
 *     (files.c), since changing an overlay's upper layer beside it is
 *     undefined. Where overlayfs is unavailable (or META's filesystem has
 *     no user extended attributes) the launcher binds META/root at
 *     META/mnt instead, and the path shows. A caller's workdir, the
 *     supervisor program and an image are bound as they are, so their host
 *     paths show.
 */
#include "local.h"
#include "proto.h"
#include "../../host/archive.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <json-c/json.h>

extern char **environ;

#define CG_BASE "/sys/fs/cgroup"

static const sbx_host_services *host;

void bwrap_setup(const sbx_host_services *services)
{
    host = services;
}

static sbx_error *bfail(sbx_error **error, sbx_error_code code, const char *op,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static sbx_error *bfail(sbx_error **error, sbx_error_code code, const char *op,
                        const char *fmt, ...)
{
    if (!error || *error || !host)
        return NULL;
    char msg[2 * PATH_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    host->set_error(error, code, op, "%s", msg);
    return *error;
}

static void bcontext(sbx_error *err, const char *key, const char *value)
{
    if (err && host && host->error_add_context)
        host->error_add_context(err, key, value);
}

/* ------------------------------------------------------------------------ */
/* Finding and checking bwrap                                                */
/* ------------------------------------------------------------------------ */

char *bwrap_find(const char *op, sbx_error **error)
{
    const char *p = getenv("SBX_BWRAP");
    if (p && *p) {
        if (access(p, X_OK) == 0)
            return strdup(p);
        sbx_error *err = bfail(error, SBX_ERROR_CONFIGURATION, op,
                               "bubblewrap backend: SBX_BWRAP=%s is not an executable "
                               "program", p);
        bcontext(err, "path", p);
        return NULL;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    const char *s = path;
    while (*s) {
        const char *e = strchr(s, ':');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len > 0 && s[0] == '/') {
            char *cand;
            if (asprintf(&cand, "%.*s/bwrap", (int)len, s) >= 0) {
                struct stat st;
                if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
                    return cand;
                free(cand);
            }
        }
        s += len;
        if (*s == ':')
            s++;
    }
    bfail(error, SBX_ERROR_CONFIGURATION, op,
          "bubblewrap backend: the bwrap program was not found in PATH; install "
          "bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) or set SBX_BWRAP");
    return NULL;
}

int bwrap_sandbox_ids(uid_t *uid, gid_t *gid)
{
    if (geteuid() != 0)
        return 0;
    if (uid)
        *uid = BWRAP_SANDBOX_UID;
    if (gid)
        *gid = BWRAP_SANDBOX_GID;
    return 1;
}

/* The check child's words when it has no descriptor left (strerror(EMFILE)
 * is not async-signal-safe). */
#define BWRAP_EMFILE "Too many open files"

int bwrap_check_userns(const char *bwrap, const char *op, sbx_error **error)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        bfail(error, local_errno_code(errno, SBX_ERROR_CREATION_FAILED), op, "pipe: %s",
              strerror(errno));
        return -1;
    }
    /* As the sandbox's bwrap runs: as its user, with the options that an
     * older bwrap lacks. */
    char *argv[] = { (char *)bwrap, "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
                     "--ro-bind", "/", "/", "true", NULL };
    uid_t uid = 0;
    gid_t gid = 0;
    int drop = bwrap_sandbox_ids(&uid, &gid);
    pid_t pid = fork();
    if (pid == 0) {
        /* Only system calls between fork and exec: the caller may have
         * threads. */
        int null = open("/dev/null", O_RDWR);
        if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(pfd[1], 2) < 0) {
            /* Short of descriptors (the pipe took the last ones): said on
             * the pipe, so that the caller does not blame bubblewrap. */
            if (errno == EMFILE || errno == ENFILE) {
                static const char m[] = "no descriptor left to check: " BWRAP_EMFILE "\n";
                ssize_t w = write(pfd[1], m, sizeof(m) - 1);
                (void)w;
                _exit(125);
            }
            _exit(126);
        }
        if (drop && (syscall(SYS_setgroups, 0, NULL) < 0
                     || syscall(SYS_setresgid, gid, gid, gid) < 0
                     || syscall(SYS_setresuid, uid, uid, uid) < 0)) {
            static const char m[] = "cannot change to the sandbox's user\n";
            if (write(2, m, sizeof(m) - 1) < 0)
                _exit(126);
            _exit(126);
        }
        execve(bwrap, argv, environ);
        static const char m[] = "cannot execute it as the sandbox's user\n";
        if (write(2, m, sizeof(m) - 1) < 0)
            _exit(127);
        _exit(127);
    }
    int fork_errno = errno;
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        sbx_error *err = bfail(error, SBX_ERROR_CONFIGURATION, op,
                               "bubblewrap backend: cannot run %s: %s", bwrap,
                               strerror(fork_errno));
        bcontext(err, "path", bwrap);
        return -1;
    }
    char msg[512];
    size_t got = 0;
    for (;;) {
        struct pollfd p = { .fd = pfd[0], .events = POLLIN };
        if (poll(&p, 1, 10000) <= 0)
            break;
        ssize_t n = read(pfd[0], msg + got, sizeof(msg) - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got == sizeof(msg) - 1)
            break;
    }
    msg[got] = '\0';
    close(pfd[0]);
    int status;
    if (kill(pid, 0) == 0 && waitpid(pid, &status, WNOHANG) == 0)
        kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    while (got > 0 && (msg[got - 1] == '\n' || msg[got - 1] == '\r'))
        msg[--got] = '\0';
    /* The check's child, or bwrap itself, ran short of descriptors: the
     * host is not to blame. */
    if ((WIFEXITED(status) && WEXITSTATUS(status) == 125 && strstr(msg, BWRAP_EMFILE))
        || strstr(msg, strerror(EMFILE)) || strstr(msg, strerror(ENFILE))) {
        sbx_error *err = bfail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op,
                               "bubblewrap backend: cannot check that %s can create an "
                               "unprivileged sandbox: %s", bwrap,
                               got ? msg : strerror(EMFILE));
        bcontext(err, "path", bwrap);
        return -1;
    }
    char who[64] = "";
    if (drop)
        snprintf(who, sizeof(who), " (run as uid %u)", (unsigned)uid);
    sbx_error *err = bfail(error, SBX_ERROR_CONFIGURATION, op,
                           "bubblewrap backend: %s%s cannot create an unprivileged sandbox "
                           "(%s); it needs bubblewrap >= 0.8 (--disable-userns) and "
                           "unprivileged user namespaces (sysctl "
                           "kernel.unprivileged_userns_clone=1, "
                           "user.max_user_namespaces > 0)", bwrap, who,
                           got ? msg : "it failed without a message");
    bcontext(err, "path", bwrap);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Cgroups                                                                   */
/* ------------------------------------------------------------------------ */

/* The parents sandbox cgroups are made in: v1 controllers, or v2. */
static int cg_v2(void)
{
    struct stat st;
    return stat(CG_BASE "/memory", &st) < 0 && access(CG_BASE "/cgroup.controllers", R_OK) == 0;
}

static int file_has_word(const char *path, const char *word)
{
    char buf[512];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    size_t wl = strlen(word);
    for (char *p = buf; (p = strstr(p, word)) != NULL; p += wl)
        if ((p == buf || p[-1] == ' ') && (p[wl] == ' ' || p[wl] == '\n' || !p[wl]))
            return 1;
    return 0;
}

/** The parent directory for controller @ctl ("memory" or "cpu"), or NULL
 *  when this process may not create cgroups there. */
static const char *cg_parent(const char *ctl)
{
    if (cg_v2()) {
        if (access(CG_BASE, W_OK) != 0 || !file_has_word(CG_BASE "/cgroup.subtree_control", ctl))
            return NULL;
        return CG_BASE;
    }
    const char *dir = strcmp(ctl, "memory") == 0 ? CG_BASE "/memory" : CG_BASE "/cpu";
    return access(dir, W_OK) == 0 ? dir : NULL;
}

uint64_t bwrap_limit_caps(void)
{
    uint64_t caps = 0;
    if (cg_parent("memory"))
        caps |= SBX_CAP_MEMORY_LIMIT;
    if (cg_parent("cpu"))
        caps |= SBX_CAP_CPU_LIMIT;
    return caps;
}

static int write_text(const char *dir, const char *file, const char *text)
{
    char *path;
    if (asprintf(&path, "%s/%s", dir, file) < 0)
        return -1;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    free(path);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/** Removes the cgroups of sandbox @id (those that exist); waits a little
 *  for the kernel to let go of exiting processes. */
void bwrap_cgroups_remove(const char *id)
{
    const char *parents[] = { CG_BASE "/memory", CG_BASE "/cpu", CG_BASE };
    for (size_t i = 0; i < sizeof(parents) / sizeof(parents[0]); i++) {
        char *dir;
        if (asprintf(&dir, "%s/sbx-%s", parents[i], id) < 0)
            continue;
        /* EBUSY until the kernel let go of the last process in it: look
         * again after 1, 2, 4, 8 and then every 10 ms, about 2 s in all. */
        long wait_us = 1000;
        for (int round = 0; round < 200; round++) {
            if (rmdir(dir) == 0 || errno == ENOENT || errno == ENOTDIR)
                break;
            if (errno != EBUSY)
                break;
            struct timespec ts = { 0, wait_us * 1000L };
            nanosleep(&ts, NULL);
            wait_us = wait_us * 2 > 10000 ? 10000 : wait_us * 2;
        }
        free(dir);
    }
}

int bwrap_cgroups_exist(const char *id)
{
    const char *parents[] = { CG_BASE "/memory", CG_BASE "/cpu", CG_BASE };
    for (size_t i = 0; i < sizeof(parents) / sizeof(parents[0]); i++) {
        char *dir;
        struct stat st;
        if (asprintf(&dir, "%s/sbx-%s", parents[i], id) < 0)
            return 1;
        int there = lstat(dir, &st) == 0 || errno != ENOENT;
        free(dir);
        if (there)
            return 1;
    }
    return 0;
}

int bwrap_oom_kills(const char *id, uint64_t *count)
{
    int v2 = cg_v2();
    char *path, buf[1024];
    if (asprintf(&path, v2 ? CG_BASE "/sbx-%s/memory.events"
                           : CG_BASE "/memory/sbx-%s/memory.oom_control", id) < 0)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    free(path);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* Lines "KEY VALUE"; the key is oom_kill in both versions. */
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        unsigned long long v;
        if (strncmp(line, "oom_kill ", 9) == 0 && sscanf(line + 9, "%llu", &v) == 1) {
            *count = v;
            return 0;
        }
    }
    return -1;
}

static int cg_make(const char *ctl, const char *id, int make, char **dir, const char *op,
                   sbx_error **error)
{
    const char *parent = cg_parent(ctl);
    const char *opt = strcmp(ctl, "memory") == 0 ? "memory_mb" : "cpu";
    if (!parent) {
        sbx_error *err = bfail(error, SBX_ERROR_CONFIGURATION, op,
                               "bubblewrap backend cannot enforce %s: this process may not "
                               "create a %s cgroup (under " CG_BASE "; usually needs root)",
                               opt, ctl);
        bcontext(err, "option", opt);
        return -1;
    }
    if (asprintf(dir, "%s/sbx-%s", parent, id) < 0) {
        *dir = NULL;
        bfail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    if (make && mkdir(*dir, 0755) < 0 && errno != EEXIST) {
        sbx_error *err = bfail(error, SBX_ERROR_CONFIGURATION, op,
                               "bubblewrap backend cannot enforce %s: cannot create "
                               "cgroup %s: %s", opt, *dir, strerror(errno));
        bcontext(err, "option", opt);
        bcontext(err, "path", *dir);
        free(*dir);
        *dir = NULL;
        return -1;
    }
    return 0;
}

int bwrap_cgroups_create(const char *id, const sbx_plugin_create_request *request, int make,
                         char **procs, size_t *nprocs, const char *op, sbx_error **error)
{
    *nprocs = 0;
    int v2 = cg_v2();
    char *mem = NULL, *cpu = NULL;
    char num[64];
    if (request->set_fields & SBX_OPTION_MEMORY_MB) {
        if (cg_make("memory", id, make, &mem, op, error) < 0)
            goto fail;
        snprintf(num, sizeof(num), "%lld", (long long)request->memory_mb * 1024 * 1024);
        int r = !make ? 0 : write_text(mem, v2 ? "memory.max" : "memory.limit_in_bytes", num);
        if (!make)
            ;
        else if (r == 0 && !v2)
            write_text(mem, "memory.memsw.limit_in_bytes", num);  /* without swap accounting: absent */
        else if (r == 0)
            write_text(mem, "memory.swap.max", "0");
        if (r < 0) {
            sbx_error *err = bfail(error, SBX_ERROR_CONFIGURATION, op,
                                   "bubblewrap backend cannot set memory_mb=%lld in %s: %s",
                                   (long long)request->memory_mb, mem, strerror(errno));
            bcontext(err, "option", "memory_mb");
            goto fail;
        }
    }
    if (request->set_fields & SBX_OPTION_CPU) {
        long long quota = (long long)(request->cpu * 100000.0 + 0.5);
        if (quota < 1000)
            quota = 1000;
        if (v2 && mem) {
            cpu = strdup(mem);      /* one v2 cgroup holds both */
        } else if (cg_make("cpu", id, make, &cpu, op, error) < 0) {
            goto fail;
        }
        int r = 0;
        if (!make) {
            /* Named only. */
        } else if (v2) {
            snprintf(num, sizeof(num), "%lld 100000", quota);
            r = write_text(cpu, "cpu.max", num);
        } else {
            snprintf(num, sizeof(num), "%lld", quota);
            r = write_text(cpu, "cpu.cfs_period_us", "100000");
            if (r == 0)
                r = write_text(cpu, "cpu.cfs_quota_us", num);
        }
        if (r < 0) {
            sbx_error *err = bfail(error, SBX_ERROR_CONFIGURATION, op,
                                   "bubblewrap backend cannot set cpu=%g in %s: %s",
                                   request->cpu, cpu, strerror(errno));
            bcontext(err, "option", "cpu");
            goto fail;
        }
    }
    if (mem && asprintf(&procs[(*nprocs)++], "%s/cgroup.procs", mem) < 0)
        goto nomem;
    if (cpu && !(v2 && mem) && asprintf(&procs[(*nprocs)++], "%s/cgroup.procs", cpu) < 0)
        goto nomem;
    free(mem);
    free(cpu);
    return 0;
nomem:
    (*nprocs)--;
    bfail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
fail:
    for (size_t i = 0; i < *nprocs; i++)
        free(procs[i]);
    *nprocs = 0;
    free(mem);
    free(cpu);
    if (make)
        bwrap_cgroups_remove(id);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* The command line                                                          */
/* ------------------------------------------------------------------------ */

/* Top-level names of the system tree bound read-only from SRC. */
static const char *const sys_dirs[] = { "usr", "etc", "bin", "sbin", "lib", "lib32", "lib64",
                                        "libx32" };

/* Host-global parts of /proc bound read-only over the sandbox's own. */
static const char *const proc_ro[] = { "/proc/sys", "/proc/sysrq-trigger", "/proc/irq",
                                       "/proc/bus", "/proc/fs" };
/* Files of /proc that tell about the host's kernel, hidden by /dev/null. */
static const char *const proc_masked[] = { "/proc/kcore", "/proc/keys", "/proc/timer_list",
                                           "/proc/sched_debug", "/proc/latency_stats" };

typedef struct argvb {
    char **v;
    size_t n, cap;
    int failed;
} argvb;

static void add(argvb *a, const char *s)
{
    if (a->failed)
        return;
    if (a->n + 2 > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        char **v = realloc(a->v, cap * sizeof(*v));
        if (!v) {
            a->failed = 1;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    char *c = strdup(s);
    if (!c) {
        a->failed = 1;
        return;
    }
    a->v[a->n++] = c;
    a->v[a->n] = NULL;
}

static void add_path(argvb *a, const char *dir, const char *name)
{
    char *p;
    if (asprintf(&p, "%s%s%s", strcmp(dir, "/") == 0 ? "" : dir, "/", name) < 0) {
        a->failed = 1;
        return;
    }
    add(a, p);
    free(p);
}

void bwrap_argv_free(char **argv)
{
    for (char **p = argv; p && *p; p++)
        free(*p);
    free(argv);
}

int bwrap_resolve_user(const char *passwd, const char *user, uid_t *uid, gid_t *gid,
                       const char *op, sbx_error **error)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(user, &end, 10);
    int numeric = *user >= '0' && *user <= '9' && !*end && errno == 0
                  && n < (unsigned long)(uid_t)-1;
    if (!numeric && strchr(user, ':')) {
        sbx_error *err = bfail(error, SBX_ERROR_CONFIGURATION, op,
                               "bubblewrap backend: user \"%s\" is neither a user name nor a "
                               "uid (a group cannot be chosen apart)", user);
        bcontext(err, "user", user);
        return -1;
    }
    FILE *f = fopen(passwd, "re");
    struct passwd ent, *pw = NULL;
    char buf[4096];
    int found = 0;
    while (f && fgetpwent_r(f, &ent, buf, sizeof(buf), &pw) == 0 && pw) {
        if (numeric ? pw->pw_uid == (uid_t)n : strcmp(pw->pw_name, user) == 0) {
            *uid = pw->pw_uid;
            *gid = pw->pw_gid;
            found = 1;
            break;
        }
    }
    if (f)
        fclose(f);
    if (found)
        return 0;
    if (numeric) {
        *uid = (uid_t)n;
        *gid = (gid_t)n;
        return 0;
    }
    sbx_error *err = bfail(error, SBX_ERROR_CONFIGURATION, op,
                           "bubblewrap backend: user \"%s\" is not in the sandbox's "
                           "/etc/passwd (%s); give a uid, or a name it has", user, passwd);
    bcontext(err, "user", user);
    bcontext(err, "path", passwd);
    return -1;
}

char **bwrap_argv(const char *launcher, char *const *procs, size_t nprocs, const char *bwrap,
                  const char *supervisor, const char *root, const char *meta, const char *src,
                  const char *remove, int allow_internet, const char *backend_options,
                  const uid_t *in_uid, const gid_t *in_gid, const char *spare_id,
                  const char *op, sbx_error **error)
{
    argvb a = { 0 };
    json_object *opts = NULL, *binds = NULL;
    if (backend_options && *backend_options) {
        opts = json_tokener_parse(backend_options);
        if (!opts || !json_object_is_type(opts, json_type_object)) {
            sbx_error *err = bfail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                   "bubblewrap backend_options must be a JSON object like "
                                   "{\"ro_binds\":[\"/path\"]}, not %s", backend_options);
            bcontext(err, "option", "backend_options");
            json_object_put(opts);
            return NULL;
        }
        json_object_object_foreach(opts, key, val) {
            if (strcmp(key, "root_dir") == 0)
                continue;       /* bwrap_root_dir checked it */
            if (strcmp(key, "ro_binds") != 0) {
                sbx_error *err = bfail(error, SBX_ERROR_CONFIGURATION, op,
                                       "bubblewrap backend_options: unknown key \"%s\" "
                                       "(known: " BWRAP_OPTION_KEYS ")", key);
                bcontext(err, "option", "backend_options");
                bcontext(err, "name", key);
                json_object_put(opts);
                return NULL;
            }
            if (!json_object_is_type(val, json_type_array)) {
                sbx_error *err = bfail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                       "bubblewrap backend_options: \"ro_binds\" must be an "
                                       "array of absolute host paths, not %s",
                                       json_object_to_json_string(val));
                bcontext(err, "option", "backend_options");
                bcontext(err, "name", key);
                json_object_put(opts);
                return NULL;
            }
            binds = val;
        }
        for (size_t i = 0; binds && i < json_object_array_length(binds); i++) {
            json_object *b = json_object_array_get_idx(binds, i);
            const char *path = json_object_is_type(b, json_type_string)
                               ? json_object_get_string(b) : NULL;
            if (!path || path[0] != '/' || access(path, F_OK) != 0) {
                sbx_error *err = bfail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                       "bubblewrap backend_options: ro_binds entry %s is "
                                       "not an existing absolute host path",
                                       path ? path : json_object_to_json_string(b));
                bcontext(err, "option", "backend_options");
                json_object_put(opts);
                return NULL;
            }
            if (bwrap_check_reach(path, "the ro_binds entry", op, error) < 0) {
                bcontext(error ? *error : NULL, "option", "backend_options");
                json_object_put(opts);
                return NULL;
            }
        }
    }
    add(&a, launcher);
    add(&a, "--launch");
    for (size_t i = 0; i < nprocs; i++) {
        char *o;
        if (asprintf(&o, "--cgroup-procs=%s", procs[i]) < 0) {
            a.failed = 1;
            break;
        }
        add(&a, o);
        free(o);
    }
    /* Its keeper removes META (and @remove) when the sandbox ends on its
     * own or its init is killed. */
    char *keep_arg = NULL;
    if (asprintf(&keep_arg, "--keep=%s", meta) < 0) {
        keep_arg = NULL;
        a.failed = 1;
    } else {
        add(&a, keep_arg);
        add(&a, "--make-keep");
        free(keep_arg);
    }
    if (remove) {
        char *o;
        if (asprintf(&o, "--remove=%s", remove) < 0) {
            a.failed = 1;
        } else {
            add(&a, o);
            free(o);
        }
    }
    /* bwrap's mount points in a caller's root_dir go then too. */
    if (strncmp(root, meta, strlen(meta)) != 0) {
        char *o;
        if (asprintf(&o, "--clean-root=%s", root) < 0) {
            a.failed = 1;
        } else {
            add(&a, o);
            free(o);
        }
    }
    /* A caller's workdir lent to the sandbox's user goes back then too. */
    if (strncmp(root, meta, strlen(meta)) != 0 && bwrap_sandbox_ids(NULL, NULL)) {
        char *o;
        if (asprintf(&o, "--lent=%s", root) < 0) {
            a.failed = 1;
        } else {
            add(&a, o);
            free(o);
        }
    }
    /* The filter is compiled by the launcher, onto BWRAP_SECCOMP_FD. */
    add(&a, "--seccomp-fd=" BWRAP_SECCOMP_FD_STR);
    /* An owned root (META/root) is bound through the launcher's overlay. */
    char *own_root = NULL, *own_mnt = NULL;
    if (asprintf(&own_root, "%s/root", meta) < 0) {
        own_root = NULL;
        a.failed = 1;
    } else if (asprintf(&own_mnt, "%s/mnt", meta) < 0) {
        own_mnt = NULL;
        a.failed = 1;
    }
    int overlay = !a.failed && strcmp(root, own_root) == 0;
    if (spare_id && !overlay)
        a.failed = 1;       /* a warm sandbox has its own root */
    if (spare_id) {
        char *o;
        if (asprintf(&o, "--spare-id=%s", spare_id) < 0) {
            a.failed = 1;
        } else {
            add(&a, o);
            free(o);
        }
    }
    if (overlay) {
        char *o;
        if (asprintf(&o, "--overlay=%s", meta) < 0) {
            a.failed = 1;
        } else {
            add(&a, o);
            free(o);
        }
    }
    uid_t uid;
    gid_t gid;
    if (bwrap_sandbox_ids(&uid, &gid)) {
        char *o;
        if (asprintf(&o, "--user=%u:%u", (unsigned)uid, (unsigned)gid) < 0) {
            a.failed = 1;
        } else {
            add(&a, o);
            free(o);
        }
    }
    add(&a, "--");
    add(&a, bwrap);
    add(&a, "--unshare-user");
    /* The create-time user: the one uid (and gid) of the namespace. */
    if (in_uid && in_gid) {
        char *u = NULL, *g = NULL;
        if (asprintf(&u, "%u", (unsigned)*in_uid) < 0)
            u = NULL;
        if (asprintf(&g, "%u", (unsigned)*in_gid) < 0)
            g = NULL;
        if (!u || !g) {
            a.failed = 1;
        } else {
            add(&a, "--uid");
            add(&a, u);
            add(&a, "--gid");
            add(&a, g);
        }
        free(u);
        free(g);
    }
    add(&a, "--disable-userns");
    add(&a, "--cap-drop");
    add(&a, "ALL");
    add(&a, "--seccomp");
    add(&a, BWRAP_SECCOMP_FD_STR);
    add(&a, "--unshare-pid");
    add(&a, "--unshare-ipc");
    add(&a, "--unshare-uts");
    if (!allow_internet)
        add(&a, "--unshare-net");
    add(&a, "--new-session");
    add(&a, "--as-pid-1");
    add(&a, "--hostname");
    add(&a, "sbx");
    if (spare_id && overlay) {
        /* The launcher passes "--bind META/mnt /" on a descriptor. */
        add(&a, "--args");
        add(&a, PROTO_ROOT_ARGS_FD_STR);
    } else {
        add(&a, "--bind");
        add(&a, overlay ? own_mnt : root);
        add(&a, "/");
    }
    free(own_root);
    free(own_mnt);
    for (size_t i = 0; i < sizeof(sys_dirs) / sizeof(sys_dirs[0]); i++) {
        char *p;
        if (asprintf(&p, "%s/%s", strcmp(src, "/") == 0 ? "" : src, sys_dirs[i]) < 0) {
            a.failed = 1;
            break;
        }
        struct stat st;
        char target[PATH_MAX];
        ssize_t tl;
        if (lstat(p, &st) < 0) {
            if (i < 2) {
                sbx_error *err = bfail(error, SBX_ERROR_CONFIGURATION, op,
                                       "bubblewrap backend: %s has no /%s (%s)",
                                       strcmp(src, "/") == 0 ? "the host" : src, sys_dirs[i],
                                       strerror(errno));
                bcontext(err, "path", p);
                free(p);
                bwrap_argv_free(a.v);
                json_object_put(opts);
                return NULL;
            }
        } else if (S_ISLNK(st.st_mode)
                   && (tl = readlink(p, target, sizeof(target) - 1)) > 0) {
            target[tl] = '\0';
            add(&a, "--symlink");
            add(&a, target);
            add_path(&a, "/", sys_dirs[i]);
        } else if (S_ISDIR(st.st_mode)) {
            add(&a, "--ro-bind");
            add(&a, p);
            add_path(&a, "/", sys_dirs[i]);
        }
        free(p);
    }
    for (size_t i = 0; binds && i < json_object_array_length(binds); i++) {
        const char *path = json_object_get_string(json_object_array_get_idx(binds, i));
        add(&a, "--ro-bind");
        add(&a, path);
        add(&a, path);
    }
    json_object_put(opts);
    add(&a, "--proc");
    add(&a, "/proc");
    /* The host-global knobs of /proc: read-only, or hidden behind
     * /dev/null (those the host's /proc has). */
    for (size_t i = 0; i < sizeof(proc_ro) / sizeof(proc_ro[0]); i++) {
        if (access(proc_ro[i], F_OK) == 0) {
            add(&a, "--ro-bind");
            add(&a, proc_ro[i]);
            add(&a, proc_ro[i]);
        }
    }
    for (size_t i = 0; i < sizeof(proc_masked) / sizeof(proc_masked[0]); i++) {
        if (access(proc_masked[i], F_OK) == 0) {
            add(&a, "--ro-bind");
            add(&a, "/dev/null");
            add(&a, proc_masked[i]);
        }
    }
    add(&a, "--dev");
    add(&a, "/dev");
    add(&a, "--ro-bind");
    add(&a, supervisor);
    add(&a, BWRAP_SUPERVISOR);
    (void)meta;     /* nothing of it is bound inside */
    add(&a, "--chdir");
    add(&a, "/");
    add(&a, "--clearenv");
    /* Sanitizer settings pass, so instrumented builds behave as asked. */
    static const char *const passed[] = { "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS" };
    for (size_t i = 0; i < sizeof(passed) / sizeof(passed[0]); i++) {
        const char *v = getenv(passed[i]);
        if (v) {
            add(&a, "--setenv");
            add(&a, passed[i]);
            add(&a, v);
        }
    }
    add(&a, "--");
    add(&a, BWRAP_SUPERVISOR);
    add(&a, "--control-fd=3");
    add(&a, "--init");
    if (spare_id) {
        /* Waits for CONFIG as long as its socket is open. */
        char *o;
        if (asprintf(&o, "--spare=%s", spare_id) < 0) {
            a.failed = 1;
        } else {
            add(&a, o);
            free(o);
        }
    }
    if (a.failed || !a.v) {
        bwrap_argv_free(a.v);
        bfail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    return a.v;
}

/* ------------------------------------------------------------------------ */
/* The sandbox's user                                                        */
/* ------------------------------------------------------------------------ */

/* META/workdir-owner: "UID GID\n", the owner a caller's workdir had before
 * create lent it to the sandbox's user. */

static int chown_dir(const char *path, uid_t uid, gid_t gid)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = fchown(fd, uid, gid);
    int e = errno;
    close(fd);
    errno = e;
    return r;
}

/* 0 when @uid/@gid (no supplementary groups) may search every directory
 * from / down to @path's parent; else -1 with the first one that stops it
 * in @stop (malloc'd) and its stat in @st. ACLs are not looked at. */
static int searchable(const char *path, uid_t uid, gid_t gid, char **stop, struct stat *st)
{
    size_t len = strlen(path);
    char *dir = malloc(len + 2);
    if (!dir)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (path[i] != '/')
            continue;
        /* The directory path[0..i), "/" for the first slash. */
        memcpy(dir, path, i ? i : 1);
        dir[i ? i : 1] = '\0';
        if (stat(dir, st) < 0)
            continue;
        mode_t bit = st->st_uid == uid ? S_IXUSR : st->st_gid == gid ? S_IXGRP : S_IXOTH;
        if (!(st->st_mode & bit)) {
            *stop = dir;
            return -1;
        }
    }
    free(dir);
    return 0;
}

int bwrap_check_reach(const char *path, const char *what, const char *op, sbx_error **error)
{
    uid_t uid;
    gid_t gid;
    char *stop = NULL;
    struct stat st;
    if (!bwrap_sandbox_ids(&uid, &gid) || searchable(path, uid, gid, &stop, &st) == 0)
        return 0;
    sbx_error *err = bfail(error, SBX_ERROR_CONFIGURATION, op,
                           "bubblewrap backend: %s %s is out of reach of the sandbox's user "
                           "(uid %u: run as root, the library runs bwrap as uid %u): %s "
                           "(mode 0%o, owner %u) is not searchable by it; make it so "
                           "(chmod o+x)%s", what, path, (unsigned)uid, (unsigned)uid,
                           stop ? stop : "?", (unsigned)(st.st_mode & 07777),
                           (unsigned)st.st_uid,
                           strcmp(what, "the temporary directory") == 0
                           ? " or set TMPDIR to a directory others may search" : "");
    bcontext(err, "path", stop ? stop : path);
    free(stop);
    return -1;
}

int bwrap_prepare_dirs(const char *meta, const char *root, int owns_root, const char *tmp,
                       int made_tmp, const char *op, sbx_error **error)
{
    uid_t uid = (uid_t)-1;
    gid_t gid = (gid_t)-1;
    int drop = bwrap_sandbox_ids(&uid, &gid);
    /* An owned root is the upper layer of the launcher's overlay: its
     * empty lower layer, its work directory and its mount point. */
    static const char *const layers[] = { "lower", "work", "mnt" };
    for (size_t i = 0; owns_root && i < sizeof(layers) / sizeof(layers[0]); i++) {
        char *d;
        if (asprintf(&d, "%s/%s", meta, layers[i]) < 0) {
            bfail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            return -1;
        }
        if (mkdir(d, 0700) < 0 || (drop && chown_dir(d, uid, gid) < 0)) {
            int e = errno;
            sbx_error *err = bfail(error, local_errno_code(e, SBX_ERROR_CREATION_FAILED), op,
                                   "bubblewrap backend: cannot create %s: %s", d, strerror(e));
            bcontext(err, "path", d);
            free(d);
            return -1;
        }
        free(d);
    }
    if (!drop)
        return 0;
    char *rec = NULL;
    const char *what = meta;
    int rc = -1;
    if (asprintf(&rec, "%s/" PROTO_WORKDIR_OWNER, meta) < 0) {
        bfail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    /* bwrap, running as the sandbox's user, passes through META to the
     * root; nothing else of META is its. */
    if (chmod(meta, 0711) < 0)
        goto fail;
    what = root;
    if (!owns_root) {
        struct stat st;
        if (stat(root, &st) < 0)
            goto fail;
        if (st.st_uid != uid || st.st_gid != gid) {
            /* Lent for the sandbox's life; destroy gives it back. */
            int fd = open(rec, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            char line[64];
            int n = snprintf(line, sizeof(line), "%u %u\n", (unsigned)st.st_uid,
                             (unsigned)st.st_gid);
            what = rec;
            if (fd < 0)
                goto fail;
            if (write(fd, line, (size_t)n) != n) {
                int e = errno;
                close(fd);
                errno = e ? e : EIO;
                goto fail;
            }
            if (close(fd) < 0)
                goto fail;
            what = root;
        }
    }
    if (chown_dir(root, uid, gid) < 0)
        goto fail;
    what = tmp;
    if ((owns_root || made_tmp) && chown_dir(tmp, uid, gid) < 0)
        goto fail;
    rc = 0;
    goto out;
fail: {
        int e = errno;
        sbx_error *err = bfail(error, local_errno_code(e, SBX_ERROR_CREATION_FAILED), op,
                               "bubblewrap backend: cannot give %s to the sandbox's user "
                               "(uid %u): %s", what, (unsigned)uid, strerror(e));
        bcontext(err, "path", what);
    }
out:
    free(rec);
    return rc;
}

void bwrap_return_workdir(const char *meta, const char *root)
{
    uid_t uid;
    gid_t gid;
    unsigned ou, og;
    struct stat st;
    if (!meta || !root || !bwrap_sandbox_ids(&uid, &gid)
        || proto_workdir_owner(meta, &ou, &og) < 0)
        return;
    int dfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return;
    if (fstat(dfd, &st) == 0 && st.st_uid == uid)
        if (fchown(dfd, (uid_t)ou, (gid_t)og) < 0)
            if (host && host->log)
                host->log(SBX_LOG_WARNING, "bubblewrap", "cannot give %s back to uid %u: %s",
                          root, ou, strerror(errno));
    close(dfd);
}

/* The file calls that create files run with the sandbox's user as the
 * thread's filesystem ids, so what they make is the sandbox's and they may
 * do what its commands may. setfsuid/setfsgid act on the calling thread
 * only. */
typedef struct fs_ids {
    int on;
    int uid, gid;
} fs_ids;

static int as_sandbox(fs_ids *s, const char *op, sbx_error **error)
{
    uid_t uid;
    gid_t gid;
    s->on = 0;
    if (!bwrap_sandbox_ids(&uid, &gid))
        return 0;
    s->gid = setfsgid(gid);
    s->uid = setfsuid(uid);
    s->on = 1;
    if (setfsuid((uid_t)-1) != (int)uid || setfsgid((gid_t)-1) != (int)gid) {
        setfsuid((uid_t)s->uid);
        setfsgid((gid_t)s->gid);
        s->on = 0;
        bfail(error, SBX_ERROR_EXECUTION_FAILED, op, "cannot act as the sandbox's user (uid %u)",
              (unsigned)uid);
        return -1;
    }
    return 0;
}

static void as_before(const fs_ids *s)
{
    if (s->on) {
        setfsuid((uid_t)s->uid);
        setfsgid((gid_t)s->gid);
    }
}

int bwrap_write_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                     int fd, uint32_t mode, sbx_error **error)
{
    fs_ids s;
    if (as_sandbox(&s, "write_file", error) < 0)
        return -1;
    int r = local_write_file(sandbox, ctx, path, fd, mode, error);
    as_before(&s);
    return r;
}

int bwrap_upload_tar(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                     int fd, sbx_error **error)
{
    fs_ids s;
    if (as_sandbox(&s, "upload_dir", error) < 0)
        return -1;
    int r = local_upload_tar(sandbox, ctx, path, fd, error);
    as_before(&s);
    return r;
}

/* ------------------------------------------------------------------------ */
/* root_dir and the working directory                                        */
/* ------------------------------------------------------------------------ */

/* Host directories that never become a sandbox's root: the system's own,
 * and (SYS_TREE) everything beneath the system tree. */
static const char *const refused_roots[] = { "/", "/usr", "/etc", "/bin", "/sbin", "/lib",
                                             "/lib32", "/lib64", "/libx32", "/var", "/proc",
                                             "/sys", "/dev", "/boot", "/home", "/root", "/run",
                                             "/tmp", "/opt", "/srv", "/mnt", "/media",
                                             "/var/tmp", "/var/lib", "/var/log", "/var/cache" };
static const char *const refused_trees[] = { "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32",
                                             "/lib64", "/libx32", "/proc", "/sys", "/dev",
                                             "/boot", "/run" };

/** 1 when @path (a real path) is @dir or beneath it. */
static int path_within(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

int bwrap_root_dir(const char *backend_options, char **out, const char *op, sbx_error **error)
{
    *out = NULL;
    if (!backend_options || !*backend_options)
        return 0;
    json_object *opts = json_tokener_parse(backend_options), *v;
    if (!opts || !json_object_is_type(opts, json_type_object)
        || !json_object_object_get_ex(opts, "root_dir", &v)) {
        json_object_put(opts);
        return 0;       /* bwrap_argv refuses what is not an object */
    }
    const char *given = json_object_is_type(v, json_type_string) ? json_object_get_string(v)
                                                                 : NULL;
    struct stat st;
    if (!given || given[0] != '/' || stat(given, &st) < 0 || !S_ISDIR(st.st_mode)) {
        sbx_error *err = bfail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                               "bubblewrap backend_options: root_dir %s is not an existing "
                               "absolute host directory",
                               given ? given : json_object_to_json_string(v));
        bcontext(err, "option", "root_dir");
        if (given)
            bcontext(err, "path", given);
        json_object_put(opts);
        return -1;
    }
    char *real = realpath(given, NULL);
    if (!real) {
        sbx_error *err = bfail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                               "bubblewrap backend_options: root_dir %s: %s", given,
                               strerror(errno));
        bcontext(err, "option", "root_dir");
        bcontext(err, "path", given);
        json_object_put(opts);
        return -1;
    }
    const char *refused = NULL;
    for (size_t i = 0; !refused && i < sizeof(refused_roots) / sizeof(refused_roots[0]); i++)
        if (strcmp(real, refused_roots[i]) == 0)
            refused = refused_roots[i];
    for (size_t i = 0; !refused && i < sizeof(refused_trees) / sizeof(refused_trees[0]); i++)
        if (path_within(real, refused_trees[i]))
            refused = refused_trees[i];
    if (refused) {
        int same = strcmp(real, refused) == 0;
        sbx_error *err = bfail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                               "bubblewrap backend_options: root_dir %s%s%s%s is refused: a "
                               "system directory%s never becomes a sandbox's root (bwrap "
                               "would make its mount points in it); give a directory of "
                               "your own", given, strcmp(given, real) != 0 ? " (" : "",
                               strcmp(given, real) != 0 ? real : "",
                               strcmp(given, real) != 0 ? ")" : "",
                               same ? "" : " or one beneath it");
        bcontext(err, "option", "root_dir");
        bcontext(err, "path", real);
        free(real);
        json_object_put(opts);
        return -1;
    }
    json_object_put(opts);
    *out = real;
    return 0;
}

int bwrap_check_workdir(const char *workdir, const char *src, char **out, const char *op,
                        sbx_error **error)
{
    *out = NULL;
    if (!workdir || workdir[0] != '/') {
        sbx_error *err = bfail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                               "workdir \"%s\" must be an absolute path in the sandbox",
                               workdir ? workdir : "");
        bcontext(err, "option", "workdir");
        bcontext(err, "path", workdir ? workdir : "");
        return -1;
    }
    /* The normal form: single slashes, no "." and no trailing slash. */
    size_t len = strlen(workdir);
    char *norm = malloc(len + 2), *first = NULL;
    if (!norm) {
        bfail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    size_t n = 0;
    for (const char *p = workdir; *p;) {
        while (*p == '/')
            p++;
        const char *e = p;
        while (*e && *e != '/')
            e++;
        size_t cl = (size_t)(e - p);
        if (cl == 2 && p[0] == '.' && p[1] == '.') {
            free(norm);
            sbx_error *err = bfail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                   "workdir \"%s\" must not contain \"..\"", workdir);
            bcontext(err, "option", "workdir");
            bcontext(err, "path", workdir);
            return -1;
        }
        if (cl > 0 && !(cl == 1 && p[0] == '.')) {
            norm[n++] = '/';
            if (!first)
                first = norm + n;
            memcpy(norm + n, p, cl);
            n += cl;
        }
        p = e;
    }
    if (n == 0)
        norm[n++] = '/';
    norm[n] = '\0';
    if (strcmp(norm, "/") == 0) {
        *out = norm;
        return 0;
    }
    size_t fl = strcspn(first, "/");
    /* What bwrap mounts: the system tree (from @src, read-only), /proc,
     * /dev and the supervisor's /.sbx. A workdir there must exist. */
    int sys = 0;
    for (size_t i = 0; i < sizeof(sys_dirs) / sizeof(sys_dirs[0]); i++)
        if (strlen(sys_dirs[i]) == fl && strncmp(first, sys_dirs[i], fl) == 0)
            sys = 1;
    if (sys) {
        char *host_path;
        struct stat st;
        if (asprintf(&host_path, "%s%s", strcmp(src, "/") == 0 ? "" : src, norm) < 0) {
            free(norm);
            bfail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            return -1;
        }
        int ok = stat(host_path, &st) == 0 && S_ISDIR(st.st_mode);
        free(host_path);
        if (ok) {
            *out = norm;
            return 0;
        }
    }
    if (sys || (fl == 4 && strncmp(first, "proc", 4) == 0)
        || (fl == 3 && strncmp(first, "dev", 3) == 0)
        || (fl == 4 && strncmp(first, ".sbx", 4) == 0)) {
        sbx_error *err = bfail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                               "workdir \"%s\" %s and cannot be made: /%.*s is %s in the "
                               "sandbox", workdir, sys ? "does not exist" : "is refused",
                               (int)fl, first,
                               sys ? "bound read-only from the host" : "the sandbox's own");
        bcontext(err, "option", "workdir");
        bcontext(err, "path", workdir);
        free(norm);
        return -1;
    }
    *out = norm;
    return 0;
}

int bwrap_make_workdir(const char *root, const char *workdir, char **made, const char *op,
                       sbx_error **error)
{
    *made = NULL;
    if (strcmp(workdir, "/") == 0)
        return 0;
    int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0) {
        int e = errno;
        sbx_error *err = bfail(error, local_errno_code(e, SBX_ERROR_CREATION_FAILED), op,
                               "cannot open %s: %s", root, strerror(e));
        bcontext(err, "path", root);
        return -1;
    }
    /* The first component that does not exist yet is what create made
     * (removed again when create fails). */
    const char *p = workdir + 1;
    char *prefix = strdup(workdir);
    if (!prefix) {
        close(rfd);
        bfail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    for (;;) {
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - workdir) : strlen(workdir);
        prefix[l] = '\0';
        struct stat st;
        if (fstatat(rfd, prefix + 1, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (asprintf(made, "%s%s", root, prefix) < 0)
                *made = NULL;
            break;
        }
        if (!e)
            break;
        prefix[l] = '/';
        p = e + 1;
    }
    free(prefix);
    fs_ids s;
    if (as_sandbox(&s, op, error) < 0) {
        close(rfd);
        free(*made);
        *made = NULL;
        return -1;
    }
    int fd = sbx_fs_open_beneath(rfd, workdir, SBX_BENEATH_CREATE_DIRS,
                                 O_RDONLY | O_DIRECTORY, 0);
    int e = errno;
    as_before(&s);
    close(rfd);
    if (fd < 0) {
        sbx_error *err = bfail(error, e == ENOTDIR || e == EEXIST ? SBX_ERROR_INVALID_ARGUMENT
                                     : SBX_ERROR_CREATION_FAILED, op,
                               "cannot make workdir \"%s\" in the sandbox: %s", workdir,
                               e == EXDEV ? "it leads outside the root (through a symlink)"
                               : strerror(e));
        bcontext(err, "option", "workdir");
        bcontext(err, "path", workdir);
        if (*made)
            proto_rm_tree(*made);
        free(*made);
        *made = NULL;
        return -1;
    }
    close(fd);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* A caller's workdir                                                        */
/* ------------------------------------------------------------------------ */

void bwrap_clean_root(const char *root)
{
    proto_clean_bwrap_root(root);
}
