/*
 * tests/wire_decode.h — the decoders of both wire protocols driven the way
 * their readers drive them, with the promises the getters make checked
 * after each value. Shared by tests/test_wire.c (the seeded mutation loop
 * of the normal suite) and tests/fuzz_wire.c (the libFuzzer entry point).
 *
 * Each function returns NULL, or the promise that was broken (a static
 * string). Reads past a frame are for AddressSanitizer to catch.
 */
#ifndef SBX_TESTS_WIRE_DECODE_H
#define SBX_TESTS_WIRE_DECODE_H

#include <stdlib.h>
#include <string.h>

#include "../host/slots.h"
#include "../host/wire.h"
#include "../plugins/local/proto.h"

/* 1 when @s (length @len, from a getter) lies inside @m's body with its NUL. */
static inline int
wd_inside(const sbx_wire_msg *m, const void *s, size_t len)
{
    const char *p = s;

    return p >= m->body.data && p + len < m->body.data + m->body.len && p[len] == '\0';
}

static inline const char *
wd_str(const sbx_wire_msg *m, const char *s)
{
    return s && !wd_inside(m, s, strlen(s)) ? "a string outside its frame" : NULL;
}

static inline const char *
wd_strv(sbx_wire_msg *m)
{
    int null;
    const char **v = sbx_wire_get_strv(m, &null);
    const char *why = NULL;

    if (v && m->bad)
        why = "a vector returned from a bad frame";
    for (size_t k = 0; v && v[k] && !why; k++)
        why = wd_str(m, v[k]);
    free(v);
    return why;
}

#define WD_TRY(expr)                  \
    do {                              \
        const char *wd_why_ = (expr); \
        if (wd_why_)                  \
            return wd_why_;           \
    } while (0)

/*
 * Decodes @m's body as sbx-plugin-host decodes a CALL of its slot (the IN
 * arguments in row order; @m->slot below SBX_SLOT_COUNT). *@whole is 1
 * when the body decoded whole and exactly.
 */
static inline const char *
wd_decode_call(sbx_wire_msg *m, int *whole)
{
    const sbx_slot_row *row = &sbx_slot_rows[m->slot];
    size_t len;

    *whole = 0;
    for (unsigned i = 0; i < row->nargs; i++) {
        if (row->dir[i] != SBX_DIR_IN)
            continue;
        switch (row->enc[i]) {
        case SBX_ENC_CLIENT:
        case SBX_ENC_SANDBOX:
        case SBX_ENC_PROCESS:
        case SBX_ENC_SIZE:
            sbx_wire_get_u64(m);
            break;
        case SBX_ENC_CTX:
            sbx_wire_get_f64(m);
            WD_TRY(wd_str(m, sbx_wire_get_str(m)));
            break;
        case SBX_ENC_STR:
            WD_TRY(wd_str(m, sbx_wire_get_str(m)));
            break;
        case SBX_ENC_BYTES: {
            const void *b = sbx_wire_get_bytes(m, &len);

            if (b && !wd_inside(m, b, len))
                return "bytes outside their frame";
            if (!b && len)
                return "no bytes with a length";
            break;
        }
        case SBX_ENC_INT:
            sbx_wire_get_i64(m);
            break;
        case SBX_ENC_U32:
            sbx_wire_get_u32(m);
            break;
        case SBX_ENC_FD:
            if (sbx_wire_take_fd(m) != -1)
                return "a descriptor no frame passed";
            break;
        case SBX_ENC_CREATE_REQ:
            sbx_wire_get_u64(m);
            sbx_wire_get_f64(m);
            sbx_wire_get_i64(m);
            sbx_wire_get_f64(m);
            WD_TRY(wd_str(m, sbx_wire_get_str(m)));
            WD_TRY(wd_strv(m));
            sbx_wire_get_f64(m);
            for (int k = 0; k < 5; k++)
                WD_TRY(wd_str(m, sbx_wire_get_str(m)));
            sbx_wire_get_i64(m);
            sbx_wire_get_i64(m);
            WD_TRY(wd_str(m, sbx_wire_get_str(m)));
            sbx_wire_get_i64(m);        /* detached */
            {
                uint32_t n = sbx_wire_get_u32(m);   /* ports */
                for (uint32_t k = 0; k < n && k < 65535; k++)
                    sbx_wire_get_u32(m);
            }
            break;
        case SBX_ENC_EXEC_REQ:
            WD_TRY(wd_strv(m));
            WD_TRY(wd_str(m, sbx_wire_get_str(m)));
            WD_TRY(wd_strv(m));
            WD_TRY(wd_str(m, sbx_wire_get_str(m)));
            WD_TRY(wd_str(m, sbx_wire_get_str(m)));
            sbx_wire_get_u32(m);
            sbx_wire_get_u32(m);
            for (int k = 0; k < 3; k++)
                if (sbx_wire_take_fd(m) != -1)
                    return "a descriptor no frame passed";
            sbx_wire_get_i64(m);
            break;
        default:
            break;
        }
        if (m->pos > m->body.len)
            return "the cursor passed the body";
    }
    *whole = !m->bad && m->pos == m->body.len;
    return NULL;
}

/* Decodes @m as a REPLY that carries an error. */
static inline const char *
wd_decode_reply(sbx_wire_msg *m)
{
    const char *why = NULL;
    sbx_error *e;

    sbx_wire_get_i64(m);
    sbx_wire_get_u32(m);
    e = sbx_wire_get_error(m);
    if (e && (int)sbx_error_get_code(e) >= SBX_ERROR_CODE_COUNT)
        why = "an error code past the known ones";
    else if (e && !sbx_error_get0_message(e))
        why = "an error without a message";
    sbx_error_free(e);
    if (!why && m->pos > m->body.len)
        why = "the cursor passed the body";
    return why;
}

static inline const char *
wd_pstr(const unsigned char *payload, size_t len, const char *s)
{
    if (!s)
        return NULL;
    if ((const unsigned char *)s < payload || (const unsigned char *)s + strlen(s) >= payload + len)
        return "a string outside its payload";
    return NULL;
}

/* Decodes @payload as a supervisor frame of @type, as the supervisor and
 * the plugin read it. *@whole is 1 when nothing was left and nothing
 * failed. */
static inline const char *
wd_decode_proto(uint32_t type, const unsigned char *payload, size_t len, int *whole)
{
    proto_reader r;

    *whole = 0;
    proto_reader_init(&r, payload, len);
    switch (type) {
    case PROTO_HELLO:
        proto_get_u32(&r);
        proto_get_i32(&r);
        proto_get_u64(&r);
        break;
    case PROTO_CONFIG: {
        WD_TRY(wd_pstr(payload, len, proto_get_str(&r)));
        uint32_t n = proto_get_u32(&r);
        for (uint32_t i = 0; i < n && !r.failed; i++)
            WD_TRY(wd_pstr(payload, len, proto_get_str(&r)));
        break;
    }
    case PROTO_EXEC: {
        uint32_t argc = proto_get_u32(&r);
        for (uint32_t i = 0; i < argc && !r.failed; i++)
            WD_TRY(wd_pstr(payload, len, proto_get_str(&r)));
        uint32_t envc = proto_get_u32(&r);
        for (uint32_t i = 0; i < envc && !r.failed; i++)
            WD_TRY(wd_pstr(payload, len, proto_get_str(&r)));
        WD_TRY(wd_pstr(payload, len, proto_get_str(&r)));
        break;
    }
    case PROTO_ERROR:
        proto_get_u32(&r);
        proto_get_i32(&r);
        WD_TRY(wd_pstr(payload, len, proto_get_str(&r)));
        break;
    case PROTO_STARTED:
    case PROTO_EXIT:
    case PROTO_KILL:
        proto_get_i32(&r);
        break;
    case PROTO_PONG:
        proto_get_u32(&r);
        break;
    default:
        break;
    }
    if (r.left > len || r.p < payload || r.p > payload + len)
        return "the reader left its payload";
    *whole = !r.failed && r.left == 0;
    return NULL;
}

#endif /* SBX_TESTS_WIRE_DECODE_H */
