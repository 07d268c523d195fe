/*
 * libFuzzer entry point for the decoders of both wire protocols (the same
 * drivers as tests/test_wire.c's seeded loop, tests/wire_decode.h).
 * Built by `make fuzz` when configure found a clang that takes
 * -fsanitize=fuzzer; not part of `make check`:
 *
 *   make fuzz && tests/fuzz_wire -max_total_time=60
 *
 * The first input byte picks the protocol: even, the plugin host's frames
 * (the rest is one packet, received with sbx_wire_recv and decoded as a
 * CALL of its slot or as a REPLY); odd, the supervisor's (a header and
 * its payload, decoded by type). A broken promise aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire_decode.h"

static void
broken(const char *why)
{
    fprintf(stderr, "fuzz_wire: %s\n", why);
    abort();
}

static void
host_frame(const uint8_t *data, size_t size)
{
    static int sv[2] = { -1, -1 };
    static void *scratch;
    sbx_wire_msg m;
    const char *why = NULL;

    if (size == 0 || size > SBX_WIRE_MAX_FRAME)
        return;
    if (sv[0] < 0 && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        broken("no socketpair");
    if (!scratch && !(scratch = malloc(SBX_WIRE_MAX_FRAME)))
        broken("out of memory");
    if (send(sv[0], data, size, 0) != (ssize_t)size)
        broken("cannot send the packet");
    if (sbx_wire_recv(sv[1], &m, scratch) != 1)
        return;
    if (m.nfds != 0)
        why = "descriptors no packet passed";
    else if (m.type == SBX_MSG_CALL && m.slot < SBX_SLOT_COUNT) {
        int whole;

        why = wd_decode_call(&m, &whole);
    } else {
        why = wd_decode_reply(&m);
    }
    sbx_wire_clear(&m);
    if (why)
        broken(why);
}

static void
supervisor_frame(const uint8_t *data, size_t size)
{
    uint32_t type, len;
    unsigned char *payload;
    const char *why;
    int whole;

    if (size < PROTO_HEADER_SIZE || proto_parse_header(data, &type, &len) < 0)
        return;
    size -= PROTO_HEADER_SIZE;
    if (len < size)
        size = len;
    /* A copy of exactly what a reader would hold. */
    payload = malloc(size ? size : 1);
    if (!payload)
        broken("out of memory");
    memcpy(payload, data + PROTO_HEADER_SIZE, size);
    why = wd_decode_proto(type, payload, size, &whole);
    free(payload);
    if (why)
        broken(why);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        supervisor_frame(data + 1, size - 1);
    else
        host_frame(data + 1, size - 1);
    return 0;
}
