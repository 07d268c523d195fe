/*
 * seccomp.c — the seccomp filter of a bubblewrap sandbox, compiled by the
 * supervisor's launcher (sbx-supervisor --launch --seccomp-fd=N) and
 * handed to bwrap with `--seccomp N`. bwrap installs it before it execs the
 * sandbox's init, so it binds the supervisor and every command.
 *
 * Everything is allowed except the calls a sandbox never needs, which fail
 * with EPERM (ENOSYS for clone3, so that C libraries fall back to clone,
 * whose flags the filter can see):
 *   - mounts and the root: mount, umount, umount2, pivot_root, chroot,
 *     move_mount, open_tree, fsopen, fsmount, fsconfig, fspick,
 *     mount_setattr;
 *   - the kernel keyring: keyctl, add_key, request_key;
 *   - bpf, perf_event_open, userfaultfd, the io_uring calls;
 *   - other processes' memory: ptrace, process_vm_readv, process_vm_writev;
 *   - kernel modules, kexec, reboot, swapon, swapoff, acct, quotactl,
 *     syslog, the clock setters, iopl, ioperm, open_by_handle_at and the
 *     obsolete calls docker's default profile refuses too;
 *   - namespaces: setns, and unshare or clone with CLONE_NEWUSER;
 *   - personality other than the query (0xffffffff) and the harmless
 *     values docker's default profile allows (0, 8 (PER_LINUX32),
 *     0x20000 (UNAME26), 0x20008).
 * On x86_64 the same rules cover the i386 and x32 system call tables.
 */
#include "seccomp.h"

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <seccomp.h>

/** Calls refused with EPERM (names as libseccomp knows them; a name this
 *  architecture lacks is skipped). */
static const char *const refused[] = {
    "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
    "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "ptrace", "process_vm_readv", "process_vm_writev",
    "init_module", "finit_module", "delete_module", "create_module", "query_module",
    "get_kernel_syms", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
    "acct", "quotactl", "quotactl_fd", "syslog", "settimeofday", "stime", "clock_settime",
    "iopl", "ioperm", "open_by_handle_at", "nfsservctl", "lookup_dcookie", "uselib",
    "ustat", "sysfs", "_sysctl", "vhangup",
    "setns",
};

/** personality values that pass. */
static const uint32_t persona_ok[] = { 0x0, 0x8, 0x20000, 0x20008, 0xffffffffu };

/* Refuses personality for every 32-bit value in the block of values whose
 * top @bits bits equal those of @prefix, except persona_ok, as the fewest
 * masked-equality rules (one comparison each: libseccomp allows one per
 * argument). The kernel reads the argument as an unsigned int, so only its
 * low 32 bits are compared. */
static int refuse_persona(scmp_filter_ctx ctx, uint32_t prefix, int bits)
{
    uint32_t mask = bits == 0 ? 0 : (uint32_t)(0xffffffffu << (32 - bits));
    int inside = 0, exact = 0;
    for (size_t i = 0; i < sizeof(persona_ok) / sizeof(persona_ok[0]); i++)
        if ((persona_ok[i] & mask) == (prefix & mask)) {
            inside = 1;
            exact = bits == 32;
        }
    if (!inside)
        return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                                SCMP_A0(SCMP_CMP_MASKED_EQ, mask, prefix & mask));
    if (exact)
        return 0;
    uint32_t bit = (uint32_t)1 << (31 - bits);
    int r = refuse_persona(ctx, prefix & ~bit, bits + 1);
    return r < 0 ? r : refuse_persona(ctx, prefix | bit, bits + 1);
}

int sbx_seccomp_filter_fd(char *msg, size_t msgsz)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    const char *step = "seccomp_init";
    int r = ctx ? 0 : -ENOMEM, fd = -1;
#if defined(__x86_64__)
    static const uint32_t more_arches[] = { SCMP_ARCH_X86, SCMP_ARCH_X32 };
    for (size_t i = 0; r == 0 && i < sizeof(more_arches) / sizeof(more_arches[0]); i++) {
        r = seccomp_arch_add(ctx, more_arches[i]);
        if (r == -EEXIST)
            r = 0;
        else if (r < 0)
            step = "seccomp_arch_add";
    }
#endif
    for (size_t i = 0; r == 0 && i < sizeof(refused) / sizeof(refused[0]); i++) {
        int nr = seccomp_syscall_resolve_name(refused[i]);
        if (nr == __NR_SCMP_ERROR)
            continue;
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
        if (r < 0)
            step = refused[i];
    }
    if (r == 0 && (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1,
                                        SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER,
                                                CLONE_NEWUSER))) < 0)
        step = "unshare";
    if (r == 0 && (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                        SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER,
                                                CLONE_NEWUSER))) < 0)
        step = "clone";
    if (r == 0 && seccomp_syscall_resolve_name("clone3") != __NR_SCMP_ERROR
        && (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
        step = "clone3";
    if (r == 0 && (r = refuse_persona(ctx, 0, 0)) < 0)
        step = "personality";
    if (r == 0) {
        fd = memfd_create("sbx-seccomp", 0);
        if (fd < 0) {
            r = -errno;
            step = "memfd_create";
        }
    }
    if (r == 0 && (r = seccomp_export_bpf(ctx, fd)) < 0)
        step = "seccomp_export_bpf";
    if (r == 0 && lseek(fd, 0, SEEK_SET) < 0) {
        r = -errno;
        step = "lseek";
    }
    if (ctx)
        seccomp_release(ctx);
    if (r < 0) {
        snprintf(msg, msgsz, "cannot compile the seccomp filter (%s: %s)", step,
                 strerror(-r));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}
