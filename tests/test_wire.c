/*
 * The two wire protocols at the byte level: the plugin host's frames
 * (host/wire.c, decoded by the rows of host/slots.h) and the local
 * backend's supervisor frames (plugins/local/proto.c).
 *
 * - Raw frames to a live sbx-plugin-host: a descriptor named by number
 *   instead of passed with the frame is refused.
 * - Bounded, deterministic mutation fuzzing: valid frames are captured,
 *   then a seeded loop flips bits, overwrites lengths, truncates and
 *   extends them a few thousand times and feeds each to the decoders.
 *   Under AddressSanitizer (build/asan) any read past a frame is a crash;
 *   everywhere the decoders' own invariants are asserted.
 *
 * Linked with the wire and proto code itself, not with libsbx (those
 * functions are internal to libsbx.so and the plugin).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wire_decode.h"

/* ------------------------------------------------------------------ helpers */

static uint64_t g_rng;

/* xorshift64*: the same sequence on every run. */
static uint64_t rnd(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * UINT64_C(2685821657736338717);
}

static size_t rnd_below(size_t n)
{
    return n ? (size_t)(rnd() % n) : 0;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(p);
    return 0;
}

/* ------------------------------------------------------------------ raw host */

static void *g_scratch;

/* Starts `sbx-plugin-host --serve 3` on a socketpair; returns our end. */
static int start_raw_host(pid_t *pid)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    *pid = fork();
    cr_assert(*pid >= 0);
    if (*pid == 0) {
        dup2(sv[1], 3);
        execl(getenv("SBX_PLUGIN_HOST"), "sbx-plugin-host", "--serve", "3", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    return sv[0];
}

static void send_ok(int sock, sbx_wire_msg *m)
{
    cr_assert_eq(sbx_wire_send(sock, m), 0, "send: %s", strerror(errno));
    sbx_wire_clear(m);
}

/* The next REPLY for @call_id (ENTRY frames are not expected here). */
static void recv_reply(int sock, uint64_t call_id, sbx_wire_msg *m)
{
    cr_assert_eq(sbx_wire_recv(sock, m, g_scratch), 1, "no reply: %s", strerror(errno));
    cr_assert_eq(m->type, (uint32_t)SBX_MSG_REPLY, "frame type %u", m->type);
    cr_assert_eq(m->call_id, call_id);
}

static void put_ctx(sbx_wire_msg *m)
{
    sbx_wire_put_f64(m, 0);        /* no deadline */
    sbx_wire_put_str(m, NULL);     /* no create token */
}

/* An exec_start CALL on sandbox handle @sb running `true`, no descriptors
 * passed, the stdin number @raw_stdin on the wire. */
static void send_exec(int sock, uint64_t call_id, uint64_t sb, int64_t raw_stdin)
{
    static const char *const argv[] = { "true", NULL };
    sbx_wire_msg m;

    sbx_wire_init(&m, SBX_MSG_CALL, SBX_SLOT_ID_exec_start, call_id);
    sbx_wire_put_u64(&m, sb);
    put_ctx(&m);
    sbx_wire_put_strv(&m, argv);
    sbx_wire_put_str(&m, NULL);    /* shell */
    sbx_wire_put_strv(&m, NULL);   /* env */
    sbx_wire_put_str(&m, NULL);    /* cwd */
    sbx_wire_put_str(&m, NULL);    /* user */
    sbx_wire_put_u32(&m, 0);
    sbx_wire_put_u32(&m, 0);
    sbx_wire_put_fd(&m, -1);       /* stdin, stdout, stderr: none passed */
    sbx_wire_put_fd(&m, -1);
    sbx_wire_put_fd(&m, -1);
    sbx_wire_put_i64(&m, raw_stdin);
    sbx_wire_put_u32(&m, 0);       /* flags (wire 4): none */
    sbx_wire_put_fd(&m, -1);       /* exit_fd (wire 7): none */
    sbx_wire_put_f64(&m, 0);       /* start_deadline (wire 9): none */
    send_ok(sock, &m);
}

/*
 * exec_start with no descriptor passed and a descriptor number in the
 * frame's stdin field: 3 is the host's own control socket, 0 its stdin.
 * Both are refused with invalid_argument naming the number, nothing runs;
 * -1 (EOF at once) still starts the command.
 */
Test(wire, a_descriptor_number_not_passed_with_the_frame_is_refused)
{
    char tmpl[] = "/tmp/sbx-wire-XXXXXX";
    char *tmp = mkdtemp(tmpl);
    sbx_wire_msg m;
    pid_t pid;
    int status;

    cr_assert_not_null(tmp);
    cr_assert_eq(setenv("TMPDIR", tmp, 1), 0);
    g_scratch = malloc(SBX_WIRE_MAX_FRAME);
    int sock = start_raw_host(&pid);

    sbx_wire_init(&m, SBX_MSG_HELLO, 0, 0);
    sbx_wire_put_u32(&m, SBX_WIRE_VERSION_MIN);
    sbx_wire_put_u32(&m, SBX_WIRE_VERSION_MAX);
    sbx_wire_put_str(&m, "local");
    send_ok(sock, &m);
    cr_assert_eq(sbx_wire_recv(sock, &m, g_scratch), 1);
    cr_assert_eq(m.type, (uint32_t)SBX_MSG_WELCOME);
    cr_assert_eq(sbx_wire_get_u32(&m), (uint32_t)SBX_WIRE_VERSION_MAX);
    cr_assert_eq(sbx_wire_get_u32(&m), (uint32_t)pid);
    cr_assert_eq(sbx_wire_get_u32(&m), 1u, "the local plugin did not load");
    sbx_wire_clear(&m);

    /* client_new(NULL config) -> client handle. */
    sbx_wire_init(&m, SBX_MSG_CALL, SBX_SLOT_ID_client_new, 1);
    sbx_wire_put_str(&m, NULL);
    send_ok(sock, &m);
    recv_reply(sock, 1, &m);
    cr_assert_eq(sbx_wire_get_i64(&m), 0);
    cr_assert_eq(sbx_wire_get_u32(&m), 1u);
    uint64_t client = sbx_wire_get_u64(&m);
    cr_assert_neq(client, 0u);
    sbx_wire_clear(&m);

    /* create(client, ctx, nothing set) -> sandbox handle. */
    sbx_wire_init(&m, SBX_MSG_CALL, SBX_SLOT_ID_create, 2);
    sbx_wire_put_u64(&m, client);
    put_ctx(&m);
    sbx_wire_put_u64(&m, 0);       /* set_fields */
    sbx_wire_put_f64(&m, 0);       /* cpu, memory_mb: the defaults */
    sbx_wire_put_i64(&m, 0);
    sbx_wire_put_f64(&m, 60);      /* a lifetime (a detached sandbox needs one) */
    sbx_wire_put_str(&m, NULL);
    sbx_wire_put_strv(&m, NULL);
    sbx_wire_put_f64(&m, (double)time(NULL) + 60);   /* expires_at */
    for (int i = 0; i < 5; i++)
        sbx_wire_put_str(&m, NULL);
    sbx_wire_put_i64(&m, 0);
    sbx_wire_put_i64(&m, 1);
    sbx_wire_put_str(&m, NULL);
    sbx_wire_put_i64(&m, 1);       /* detached: no owner to watch */
    sbx_wire_put_u32(&m, 0);       /* ports: none */
    sbx_wire_put_str(&m, NULL);    /* user: the default */
    send_ok(sock, &m);
    recv_reply(sock, 2, &m);
    int64_t rv = sbx_wire_get_i64(&m);
    cr_assert_eq(sbx_wire_get_u32(&m), 1u);
    uint64_t sb = sbx_wire_get_u64(&m);
    sbx_error *e = sbx_wire_get_error(&m);
    cr_assert_eq(rv, 0, "create: %s", e ? sbx_error_get0_message(e) : "");
    cr_assert_neq(sb, 0u);
    sbx_wire_clear(&m);

    static const int64_t numbers[] = { 3, 0 };
    for (size_t i = 0; i < 2; i++) {
        char want[128];

        send_exec(sock, 10 + i, sb, numbers[i]);
        recv_reply(sock, 10 + i, &m);
        cr_assert_eq(sbx_wire_get_i64(&m), -1, "exec with stdin %lld ran", (long long)numbers[i]);
        cr_assert_eq(sbx_wire_get_u32(&m), 0u, "OUT values came");
        e = sbx_wire_get_error(&m);
        cr_assert_not_null(e);
        cr_assert_eq(sbx_error_get_code(e), SBX_ERROR_INVALID_ARGUMENT, "code %d: %s",
                     (int)sbx_error_get_code(e), sbx_error_get0_message(e));
        snprintf(want, sizeof(want),
                 "exec_start: stdin descriptor %lld was not passed with the call frame "
                 "(a descriptor travels beside the frame, never as a number)",
                 (long long)numbers[i]);
        cr_assert_str_eq(sbx_error_get0_message(e), want);
        cr_assert_eq(m.nfds, 0u, "descriptors came back");
        sbx_error_free(e);
        sbx_wire_clear(&m);
    }

    /* -1 travels as itself: the command starts, a process handle comes. */
    send_exec(sock, 20, sb, -1);
    recv_reply(sock, 20, &m);
    rv = sbx_wire_get_i64(&m);
    cr_assert_eq(sbx_wire_get_u32(&m), 1u);
    cr_assert_neq(sbx_wire_get_u64(&m), 0u, "no process handle");
    cr_assert_eq(rv, 0);
    sbx_wire_clear(&m);

    /* destroy(sandbox), then EOF ends the host with status 0. */
    sbx_wire_init(&m, SBX_MSG_CALL, SBX_SLOT_ID_destroy, 30);
    sbx_wire_put_u64(&m, sb);
    put_ctx(&m);
    send_ok(sock, &m);
    recv_reply(sock, 30, &m);
    cr_assert_eq(sbx_wire_get_i64(&m), 0, "destroy failed");
    sbx_wire_clear(&m);
    close(sock);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "host status %d", status);
    free(g_scratch);
    /* The destroyed sandbox's trash and the client's spare directory are
     * removed by processes of their own, which may still be at it: try
     * again until the directory is gone (5 s at most). */
    for (int i = 0; i < 500 && access(tmp, F_OK) == 0; i++) {
        nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (access(tmp, F_OK) == 0)
            usleep(10 * 1000);
    }
    cr_expect_neq(access(tmp, F_OK), 0, "%s is left", tmp);
}

/* ------------------------------------------------------------------ fuzzing */

#define FUZZ_ROUNDS 4000

/* One frame's bytes as they travel (header + body). */
typedef struct capture {
    unsigned char *data;
    size_t len;
} capture;

/* Encodes the IN arguments of @row with plausible values. */
static void encode_row(const sbx_slot_row *row, sbx_wire_msg *m)
{
    static const char *const v2[] = { "A=1", "B=two", NULL };

    for (unsigned i = 0; i < row->nargs; i++) {
        if (row->dir[i] != SBX_DIR_IN)
            continue;
        switch (row->enc[i]) {
        case SBX_ENC_CLIENT:
        case SBX_ENC_SANDBOX:
        case SBX_ENC_PROCESS:
            sbx_wire_put_u64(m, (UINT64_C(3) << 32) | 2);
            break;
        case SBX_ENC_CTX:
            sbx_wire_put_f64(m, 12.5);
            sbx_wire_put_str(m, "token-1");
            break;
        case SBX_ENC_STR:
            sbx_wire_put_str(m, "/work/a file");
            break;
        case SBX_ENC_BYTES:
            sbx_wire_put_bytes(m, "data\0with nul", 13);
            break;
        case SBX_ENC_SIZE:
            sbx_wire_put_u64(m, 13);
            break;
        case SBX_ENC_INT:
            sbx_wire_put_i64(m, 250);
            break;
        case SBX_ENC_U32:
            sbx_wire_put_u32(m, 0644);
            break;
        case SBX_ENC_FD:
            sbx_wire_put_fd(m, -1);
            break;
        case SBX_ENC_CREATE_REQ:
            sbx_wire_put_u64(m, 0x1f);
            sbx_wire_put_f64(m, 2);
            sbx_wire_put_i64(m, 512);
            sbx_wire_put_f64(m, 60);
            sbx_wire_put_str(m, "/work");
            sbx_wire_put_strv(m, v2);
            sbx_wire_put_f64(m, 0);
            sbx_wire_put_str(m, "debian:12");
            sbx_wire_put_str(m, NULL);
            sbx_wire_put_str(m, NULL);
            sbx_wire_put_str(m, "app");
            sbx_wire_put_str(m, NULL);
            sbx_wire_put_i64(m, 1024);
            sbx_wire_put_i64(m, 1);
            sbx_wire_put_str(m, "{\"k\":1}");
            sbx_wire_put_i64(m, 0);         /* detached */
            sbx_wire_put_u32(m, 2);         /* ports */
            sbx_wire_put_u32(m, 8080);
            sbx_wire_put_u32(m, 9000);
            break;
        case SBX_ENC_EXEC_REQ:
            sbx_wire_put_strv(m, v2);
            sbx_wire_put_str(m, NULL);
            sbx_wire_put_strv(m, v2);
            sbx_wire_put_str(m, "/work");
            sbx_wire_put_str(m, NULL);
            sbx_wire_put_u32(m, 24);
            sbx_wire_put_u32(m, 80);
            sbx_wire_put_fd(m, -1);
            sbx_wire_put_fd(m, -1);
            sbx_wire_put_fd(m, -1);
            sbx_wire_put_i64(m, -1);
            break;
        default:
            break;
        }
    }
}

/* Asserts @why (from tests/wire_decode.h) is NULL. */
#define ASSERT_KEPT(why, round)                                                  \
    do {                                                                         \
        const char *why_ = (why);                                                \
        cr_assert_null(why_, "round %d: %s", (int)(round), why_ ? why_ : "");    \
    } while (0)

/* One mutation of @c in place (it may grow by up to 64 bytes). */
static void mutate(capture *c, size_t cap)
{
    static const uint32_t interesting[] = { 0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff,
                                            0x80000000u, 0xfffffffeu, 0xffffffffu, 16, 4096 };
    size_t at = rnd_below(c->len);

    switch (rnd_below(6)) {
    case 0: /* a bit */
        if (c->len)
            c->data[at] ^= (unsigned char)(1u << rnd_below(8));
        break;
    case 1: /* a byte */
        if (c->len)
            c->data[at] = (unsigned char)rnd();
        break;
    case 2: /* a length-like u32, aligned or not */
        if (c->len >= 4) {
            uint32_t v = interesting[rnd_below(sizeof(interesting) / sizeof(interesting[0]))];
            at = rnd_below(c->len - 3);
            memcpy(c->data + at, &v, 4);
        }
        break;
    case 3: /* truncate */
        c->len = rnd_below(c->len + 1);
        break;
    case 4: { /* extend with noise */
        size_t n = 1 + rnd_below(64);
        if (c->len + n <= cap) {
            for (size_t k = 0; k < n; k++)
                c->data[c->len + k] = (unsigned char)rnd();
            c->len += n;
        }
        break;
    }
    default: /* repeat a chunk */
        if (c->len >= 8 && c->len + 8 <= cap) {
            memmove(c->data + at + 8, c->data + at, c->len - at);
            c->len += 8;
        }
        break;
    }
}

/* Captures one frame as it travels: sent with sbx_wire_send, read raw. */
static capture capture_frame(sbx_wire_msg *m)
{
    int sv[2];
    capture c;

    cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    cr_assert_eq(sbx_wire_send(sv[0], m), 0);
    c.data = malloc(SBX_WIRE_MAX_FRAME);
    ssize_t n = recv(sv[1], c.data, SBX_WIRE_MAX_FRAME, 0);
    cr_assert(n > 0);
    c.len = (size_t)n;
    close(sv[0]);
    close(sv[1]);
    sbx_wire_clear(m);
    return c;
}

/*
 * Every row's CALL and a REPLY with an error, captured; each decodes back
 * whole. Then FUZZ_ROUNDS mutants of them go through sbx_wire_recv and the
 * decoders: each is refused (EPROTO) or decoded within its bounds, and the
 * socket stays usable (a valid frame after each mutant still decodes).
 */
Test(wire, fuzzed_plugin_host_frames_stay_inside_their_bounds)
{
    capture caps[SBX_SLOT_COUNT + 1];
    size_t ncaps = 0;
    void *scratch = malloc(SBX_WIRE_MAX_FRAME);
    sbx_wire_msg m;
    int sv[2];
    unsigned refused = 0, decoded = 0, whole = 0;

    cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    for (unsigned s = 0; s < SBX_SLOT_COUNT; s++) {
        sbx_wire_init(&m, SBX_MSG_CALL, s, 100 + s);
        encode_row(&sbx_slot_rows[s], &m);
        caps[ncaps++] = capture_frame(&m);
    }
    {
        sbx_error *e = sbx_error_new(SBX_ERROR_NOT_FOUND, "stat_file", "no such file: %s", "/x");
        sbx_error_add_context(e, "path", "/x");
        sbx_wire_init(&m, SBX_MSG_REPLY, SBX_SLOT_ID_stat_file, 7);
        sbx_wire_put_i64(&m, -1);
        sbx_wire_put_u32(&m, 0);
        sbx_wire_put_error(&m, e);
        sbx_error_free(e);
        caps[ncaps++] = capture_frame(&m);
    }
    /* Unmutated, each decodes whole. */
    for (size_t k = 0; k < ncaps; k++) {
        cr_assert_eq(send(sv[0], caps[k].data, caps[k].len, 0), (ssize_t)caps[k].len);
        cr_assert_eq(sbx_wire_recv(sv[1], &m, scratch), 1);
        if (m.type == SBX_MSG_CALL) {
            int w;
            cr_assert_eq(m.call_id, 100 + k);
            ASSERT_KEPT(wd_decode_call(&m, &w), -1);
            cr_assert(w, "row %s does not decode whole", sbx_slot_rows[k].name);
        } else {
            ASSERT_KEPT(wd_decode_reply(&m), -1);
            cr_assert(!m.bad && m.pos == m.body.len);
        }
        sbx_wire_clear(&m);
    }

    g_rng = UINT64_C(0x5bd1e9955bd1e995);
    capture mut = { malloc(SBX_WIRE_MAX_FRAME), 0 };
    for (unsigned round = 0; round < FUZZ_ROUNDS; round++) {
        const capture *src = &caps[rnd_below(ncaps)];
        unsigned times = 1 + (unsigned)rnd_below(4);

        memcpy(mut.data, src->data, src->len);
        mut.len = src->len;
        for (unsigned t = 0; t < times; t++)
            mutate(&mut, SBX_WIRE_MAX_FRAME);
        if (mut.len == 0)
            mut.data[mut.len++] = 0; /* an empty packet reads as EOF */
        cr_assert_eq(send(sv[0], mut.data, mut.len, 0), (ssize_t)mut.len);
        int rc = sbx_wire_recv(sv[1], &m, scratch);
        if (rc < 0) {
            cr_assert_eq(errno, EPROTO, "round %u: errno %d", round, errno);
            refused++;
        } else {
            cr_assert_eq(rc, 1, "round %u", round);
            cr_assert_eq(m.nfds, 0u);
            decoded++;
            if (m.type == SBX_MSG_CALL && m.slot < SBX_SLOT_COUNT) {
                int w;
                ASSERT_KEPT(wd_decode_call(&m, &w), round);
                whole += (unsigned)w;
            } else {
                ASSERT_KEPT(wd_decode_reply(&m), round);
            }
            sbx_wire_clear(&m);
        }
        /* The stream stays in step: a valid frame after the mutant. */
        cr_assert_eq(send(sv[0], caps[0].data, caps[0].len, 0), (ssize_t)caps[0].len);
        cr_assert_eq(sbx_wire_recv(sv[1], &m, scratch), 1, "round %u: out of step", round);
        cr_assert_eq(m.call_id, 100u);
        int w;
        ASSERT_KEPT(wd_decode_call(&m, &w), round);
        cr_assert(w);
        sbx_wire_clear(&m);
    }
    cr_assert_eq(refused + decoded, (unsigned)FUZZ_ROUNDS);
    /* The loop reached both sides of the decoder. */
    cr_assert_gt(refused, 100u, "refused %u", refused);
    cr_assert_gt(decoded, 100u, "decoded %u", decoded);
    cr_assert_gt(whole, 0u);
    for (size_t k = 0; k < ncaps; k++)
        free(caps[k].data);
    free(mut.data);
    free(scratch);
    close(sv[0]);
    close(sv[1]);
}

/* A header that claims a body in a memfd but passes none, or a body size
 * past SBX_WIRE_MAX_BODY: refused before anything is allocated. */
Test(wire, a_body_in_a_descriptor_that_never_came_is_refused)
{
    struct {
        uint32_t magic, type, slot, body_len;
        uint64_t call_id;
    } h = { SBX_WIRE_MAGIC, SBX_MSG_CALL | SBX_WIRE_BODY_IN_FD, 0, 64, 1 };
    void *scratch = malloc(SBX_WIRE_MAX_FRAME);
    sbx_wire_msg m;
    int sv[2];

    cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    cr_assert_eq(send(sv[0], &h, sizeof(h), 0), (ssize_t)sizeof(h));
    cr_assert_eq(sbx_wire_recv(sv[1], &m, scratch), -1);
    cr_assert_eq(errno, EPROTO);
    h.body_len = SBX_WIRE_MAX_BODY + 1;
    cr_assert_eq(send(sv[0], &h, sizeof(h), 0), (ssize_t)sizeof(h));
    cr_assert_eq(sbx_wire_recv(sv[1], &m, scratch), -1);
    cr_assert_eq(errno, EPROTO);
    free(scratch);
    close(sv[0]);
    close(sv[1]);
}

/* ------------------------------------------------------------------ supervisor */

static capture proto_capture(proto_buf *b)
{
    capture c;

    cr_assert_eq(proto_buf_finish(b), 0);
    c.data = malloc(b->len);
    memcpy(c.data, b->data, b->len);
    c.len = b->len;
    proto_buf_free(b);
    return c;
}

/*
 * Captured HELLO, CONFIG, EXEC, ERROR, KILL, STARTED, EXIT and PONG
 * frames decode whole; FUZZ_ROUNDS mutants each have their header refused
 * (a length past PROTO_MAX_FRAME) or their payload decoded inside its
 * bounds (the length taken from the header, as the readers take it, and
 * never more than what arrived).
 */
Test(wire, fuzzed_supervisor_frames_stay_inside_their_bounds)
{
    capture caps[8];
    size_t ncaps = 0;
    proto_buf b;
    unsigned refused = 0, short_frames = 0, decoded = 0;

    proto_buf_init(&b, PROTO_HELLO);
    proto_put_u32(&b, PROTO_VERSION);
    proto_put_i32(&b, 4242);
    proto_put_u64(&b, 123456789);
    caps[ncaps++] = proto_capture(&b);
    proto_buf_init(&b, PROTO_CONFIG);
    proto_put_str(&b, "/tmp/root");
    proto_put_u32(&b, 2);
    proto_put_str(&b, "PATH=/usr/bin:/bin");
    proto_put_str(&b, "HOME=/work");
    caps[ncaps++] = proto_capture(&b);
    proto_buf_init(&b, PROTO_EXEC);
    proto_put_u32(&b, 3);
    proto_put_str(&b, "sh");
    proto_put_str(&b, "-c");
    proto_put_str(&b, "echo \"$API_KEY\"");
    proto_put_u32(&b, 1);
    proto_put_str(&b, "API_KEY=secret");
    proto_put_str(&b, "/tmp/root/work");
    caps[ncaps++] = proto_capture(&b);
    proto_buf_init(&b, PROTO_ERROR);
    proto_put_u32(&b, PROTO_ERR_CWD);
    proto_put_i32(&b, ENOENT);
    proto_put_str(&b, "no such directory");
    caps[ncaps++] = proto_capture(&b);
    static const uint32_t ints[] = { PROTO_KILL, PROTO_STARTED, PROTO_EXIT, PROTO_PONG };
    for (size_t k = 0; k < 4; k++) {
        proto_buf_init(&b, ints[k]);
        if (ints[k] == PROTO_PONG)
            proto_put_u32(&b, PROTO_VERSION);
        else
            proto_put_i32(&b, 9);
        caps[ncaps++] = proto_capture(&b);
    }
    for (size_t k = 0; k < ncaps; k++) {
        uint32_t type, len;
        cr_assert_eq(proto_parse_header(caps[k].data, &type, &len), 0);
        cr_assert_eq((size_t)len + PROTO_HEADER_SIZE, caps[k].len);
        int whole;
        ASSERT_KEPT(wd_decode_proto(type, caps[k].data + PROTO_HEADER_SIZE, len, &whole), -1);
        cr_assert(whole, "frame %zu (type %u) does not decode whole", k, type);
    }

    g_rng = UINT64_C(0x9e3779b97f4a7c15);
    size_t cap = 4096;
    capture mut = { malloc(cap), 0 };
    for (unsigned round = 0; round < FUZZ_ROUNDS; round++) {
        const capture *src = &caps[rnd_below(ncaps)];
        unsigned times = 1 + (unsigned)rnd_below(4);
        uint32_t type, len;

        memcpy(mut.data, src->data, src->len);
        mut.len = src->len;
        for (unsigned t = 0; t < times; t++)
            mutate(&mut, cap);
        if (mut.len < PROTO_HEADER_SIZE) {
            short_frames++;
            continue;
        }
        if (proto_parse_header(mut.data, &type, &len) < 0) {
            cr_assert_gt(len, PROTO_MAX_FRAME);
            refused++;
            continue;
        }
        /* A reader waits for @len bytes; what did not arrive is not read.
         * The payload is copied so that ASan sees its exact end. */
        size_t have = mut.len - PROTO_HEADER_SIZE;
        size_t plen = len < have ? len : have;
        unsigned char *payload = malloc(plen ? plen : 1);
        memcpy(payload, mut.data + PROTO_HEADER_SIZE, plen);
        int whole;
        decoded++;
        ASSERT_KEPT(wd_decode_proto(type, payload, plen, &whole), round);
        free(payload);
    }
    cr_assert_eq(refused + short_frames + decoded, (unsigned)FUZZ_ROUNDS);
    cr_assert_gt(refused, 10u, "refused %u", refused);
    cr_assert_gt(decoded, 1000u, "decoded %u", decoded);
    for (size_t k = 0; k < ncaps; k++)
        free(caps[k].data);
    free(mut.data);
}

/* The rendering of an error keeps to one line whatever its context values
 * hold (a command's stderr ends with a newline): control characters are
 * written escaped there; the getter gives the bytes. */
Test(errors, to_string_escapes_control_characters_in_context_values)
{
    sbx_error *e = sbx_error_new(SBX_ERROR_EXECUTION_FAILED, "run_agent", "the agent failed");
    sbx_error_add_context(e, "stderr", "claude: command not found\n");
    sbx_error_add_context(e, "odd", "a\tb\r\x01\x7f\\n end");
    char *s = sbx_error_to_string(e);
    cr_assert_str_eq(s, "the agent failed [code=execution_failed; op=run_agent; "
                        "stderr=claude: command not found\\n; odd=a\\tb\\r\\x01\\x7f\\n end]");
    cr_assert_str_eq(sbx_error_get0_context(e, "stderr"), "claude: command not found\n");
    free(s);
    sbx_error_free(e);
}
