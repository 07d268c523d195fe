/*
 * demux.c — the framing of a non-TTY exec's attach stream.
 *
 * Each frame is an 8-byte header [STREAM, 0, 0, 0, SIZE as big-endian
 * uint32] followed by SIZE bytes; STREAM is 0 (stdin, written back on
 * stdout), 1 (stdout), 2 (stderr) or 3 (the Engine's own error text).
 * Frames are not aligned with reads or lines: a header or a payload may be
 * split across any number of reads, and one read may hold many frames. A
 * header with another stream byte or non-zero padding is refused (the
 * stream is then unusable), never passed on as output. A TTY exec's stream
 * is raw bytes, decided by the exec's Tty flag and never by Content-Type
 * (at API <= 1.41 the Engine labels framed streams "raw-stream" too).
 */
#include "docker.h"

#include <string.h>

void dk_demux_init(dk_demux *d, int raw)
{
    memset(d, 0, sizeof(*d));
    d->raw = raw;
}

int dk_demux_at_boundary(const dk_demux *d)
{
    return d->raw || (d->hdr_len == 0 && d->left == 0);
}

int dk_demux_feed(dk_demux *d, const unsigned char *p, size_t n, dk_demux_fn fn, void *ud)
{
    if (d->bad)
        return -1;
    if (d->raw)
        return n ? fn(ud, 1, p, n) : 0;
    while (n > 0) {
        if (d->left > 0) {
            size_t take = n < d->left ? n : d->left;
            if (fn(ud, d->stream, p, take) < 0)
                return -1;
            p += take;
            n -= take;
            d->left -= (uint32_t)take;
            continue;
        }
        size_t take = sizeof(d->hdr) - d->hdr_len;
        if (take > n)
            take = n;
        memcpy(d->hdr + d->hdr_len, p, take);
        d->hdr_len += take;
        p += take;
        n -= take;
        if (d->hdr_len < sizeof(d->hdr))
            break;
        d->hdr_len = 0;
        if (d->hdr[0] > 3 || d->hdr[1] || d->hdr[2] || d->hdr[3]) {
            d->bad = 1;
            memcpy(d->bad_hdr, d->hdr, sizeof(d->hdr));
            return -1;
        }
        d->stream = d->hdr[0] == 0 ? 1 : d->hdr[0];
        d->left = (uint32_t)d->hdr[4] << 24 | (uint32_t)d->hdr[5] << 16
                  | (uint32_t)d->hdr[6] << 8 | (uint32_t)d->hdr[7];
    }
    return 0;
}
