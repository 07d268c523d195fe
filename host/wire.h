/*
 * host/wire.h — the plugin host's wire protocol: frames on a SOCK_SEQPACKET
 * socketpair between libsbx (the proxy) and sbx-plugin-host.
 *
 * A frame is one packet: a fixed header (magic, type, slot, call id, body
 * length) and a body of values written in order (little-endian fixed-size
 * integers and doubles; strings as a u32 length, 0xffffffff for NULL, then
 * the bytes and a NUL). Descriptors travel beside the frame as SCM_RIGHTS;
 * a value of encoder FD is the index of its descriptor in the frame (or -1).
 * Bulk bytes (command output, file and directory transfer) never travel in
 * frames: the descriptors are passed and the plugin reads and writes them
 * directly.
 *
 * Conversation:
 *   proxy → host  HELLO    wire versions it speaks (min, max), backend name
 *   host  → proxy WELCOME  the version chosen, the host's pid and then either
 *                          the plugin's descriptor facts (name, version,
 *                          description, ABI, caps, which slots it has) or the
 *                          error that kept it from loading
 *   proxy → host  CALL     call id, slot number, the arguments by the row
 *   host  → proxy ENTRY    (list_files, list_owned) one entry of a call
 *   proxy → host  STOP     the caller's callback asked to stop the listing
 *   proxy → host  CANCEL   the caller cancelled the call or its deadline
 *                          passed: the plugin's cancel descriptor fires
 *   host  → proxy REPLY    call id, the return value, the OUT arguments,
 *                          then the error (a flag, then field by field)
 * The wire version is separate from the plugin ABI version: either side may
 * change while the other stays.
 */
#ifndef SBX_HOST_WIRE_H
#define SBX_HOST_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define SBX_WIRE_MAGIC 0x57584253u /* "SBXW" */
/* Version 2: the create request carries `detached`, the detach slot and
 * the owner pidfd (plugin ABI 1.1). Version 3: the exec_end_info, stop
 * and start slots (plugin ABI 1.2). Version 4: the exec request carries
 * `flags`. Version 5: the create request carries `ports` (a u32 count,
 * then a u32 per port) and the exposed-port slots (plugin ABI 1.3).
 * Version 6: the create request carries `user` (a string after the ports;
 * plugin ABI 1.4). Version 7: the exec request carries `exit_fd` (a
 * descriptor after the flags; plugin ABI 1.5). Version 8: a new sandbox's
 * handle in a reply (create, resume) is followed by its id, its root and
 * its session state (three strings, each may be null), which the library
 * keeps instead of asking for them. Version 9: the exec request carries
 * `start_deadline` (an f64 after the exit descriptor; plugin ABI 1.6). A
 * library and a host of different versions refuse each other at HELLO. */
#define SBX_WIRE_VERSION_MIN 9
#define SBX_WIRE_VERSION_MAX 9
/** Largest frame (header + body) sent as one packet, bytes. A larger body
 *  travels in a memfd passed beside a header-only packet (flag
 *  SBX_WIRE_BODY_IN_FD in the type), so a frame has no size limit. */
#define SBX_WIRE_MAX_FRAME (128 * 1024)
/** Most descriptors beside one frame (the body's memfd comes on top). */
#define SBX_WIRE_MAX_FDS 4
/** Largest body, bytes (a sanity bound on what a peer may claim). */
#define SBX_WIRE_MAX_BODY (256u * 1024 * 1024)
#define SBX_WIRE_BODY_IN_FD 0x80000000u

enum {
    SBX_MSG_HELLO = 1,
    SBX_MSG_WELCOME = 2,
    SBX_MSG_CALL = 3,
    SBX_MSG_REPLY = 4,
    SBX_MSG_ENTRY = 5,
    SBX_MSG_STOP = 6,
    SBX_MSG_CANCEL = 7,
    /* Host to libsbx, no body, after the application's end closed: the host
     * keeps attached sandboxes and waits for the application to end before
     * it destroys them and exits; libsbx does not wait for its exit. */
    SBX_MSG_LINGER = 8
};

/** One frame being written or read. Zero-initialise, then sbx_wire_init. */
typedef struct sbx_wire_msg {
    uint32_t type;
    uint32_t slot;
    uint64_t call_id;
    sbx_buf body;
    size_t pos;                       /* read cursor in body */
    int fds[SBX_WIRE_MAX_FDS];        /* owned by the message, but for */
    unsigned nfds;
    unsigned borrowed;                /* bit i: fds[i] is the caller's */
    int bad;                          /* a read ran past the body, or OOM */
    int bad_errno;                    /* why a put failed (errno), 0 = OOM */
    int fds_lost;                     /* received: descriptors were dropped
                                       * (MSG_CTRUNC: this process is out of
                                       * descriptors) */
} sbx_wire_msg;

void sbx_wire_init(sbx_wire_msg *m, uint32_t type, uint32_t slot, uint64_t call_id);
/** Frees the body and closes the descriptors still owned. */
void sbx_wire_clear(sbx_wire_msg *m);

void sbx_wire_put_u32(sbx_wire_msg *m, uint32_t v);
void sbx_wire_put_u64(sbx_wire_msg *m, uint64_t v);
void sbx_wire_put_i64(sbx_wire_msg *m, int64_t v);
void sbx_wire_put_f64(sbx_wire_msg *m, double v);
void sbx_wire_put_str(sbx_wire_msg *m, const char *s);
void sbx_wire_put_bytes(sbx_wire_msg *m, const void *data, size_t len);
/** A NULL-terminated string vector (NULL kept). */
void sbx_wire_put_strv(sbx_wire_msg *m, const char *const *v);
/** Attaches a dup of @fd (-1: none) and writes its index. */
void sbx_wire_put_fd(sbx_wire_msg *m, int fd);
/** sbx_wire_put_fd() without the copy: @fd stays the caller's, who keeps
 *  it open until the message is sent (or cleared); nothing closes it. */
void sbx_wire_put_fd_borrowed(sbx_wire_msg *m, int fd);
/** An error, field by field (a 0 flag for none). */
void sbx_wire_put_error(sbx_wire_msg *m, const sbx_error *error);

uint32_t sbx_wire_get_u32(sbx_wire_msg *m);
uint64_t sbx_wire_get_u64(sbx_wire_msg *m);
int64_t sbx_wire_get_i64(sbx_wire_msg *m);
double sbx_wire_get_f64(sbx_wire_msg *m);
/** Borrowed from the message; NULL for a NULL string. */
const char *sbx_wire_get_str(sbx_wire_msg *m);
/** Borrowed; *@len its length. */
const void *sbx_wire_get_bytes(sbx_wire_msg *m, size_t *len);
/** New NULL-terminated vector of borrowed strings (free the array only);
 *  NULL for a NULL vector (and on failure, with m->bad set). */
const char **sbx_wire_get_strv(sbx_wire_msg *m, int *is_null);
/** Takes the descriptor the index names out of the message (-1: none). */
int sbx_wire_take_fd(sbx_wire_msg *m);
/** A new error rebuilt field by field, or NULL when none was sent. */
sbx_error *sbx_wire_get_error(sbx_wire_msg *m);

/** Sends @m as one packet with its descriptors (a large body in a memfd).
 *  0, or -1 with errno (the put's errno when a put failed). */
int sbx_wire_send(int sock, const sbx_wire_msg *m);
/**
 * Receives one packet into @m (initialised here) using @scratch of
 * SBX_WIRE_MAX_FRAME bytes. Returns 1, 0 at EOF, -1 on error (errno; EPROTO
 * for a frame that is not ours). Descriptors the kernel could not install
 * (this process at its limit) leave the frame usable with m->fds_lost set.
 */
int sbx_wire_recv(int sock, sbx_wire_msg *m, void *scratch);
/** sbx_wire_recv() that does not wait: -1 with errno EAGAIN when no frame
 *  is there. */
int sbx_wire_recv_nowait(int sock, sbx_wire_msg *m, void *scratch);

/** "killed by signal 11 (SIGSEGV)" / "exited with status 3" (new string). */
char *sbx_wait_status_text(int status);

#endif /* SBX_HOST_WIRE_H */
