/*
 * seccomp.h — the bubblewrap sandbox's seccomp filter (seccomp.c lists
 * what it refuses).
 */
#ifndef SBX_LOCAL_SECCOMP_H
#define SBX_LOCAL_SECCOMP_H

#include <stddef.h>

/**
 * Compiles the filter to classic BPF, as `bwrap --seccomp FD` reads it.
 * Returns a new descriptor (a memfd positioned at offset 0, not
 * close-on-exec, owned by the caller), or -1 with a message naming the
 * failing step in @msg (@msgsz bytes, NUL-terminated). Not thread-safe
 * (libseccomp's state is per call, but the launcher is single-threaded).
 */
int sbx_seccomp_filter_fd(char *msg, size_t msgsz);

#endif
