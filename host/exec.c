/*
 * host/exec.c — the exec engine behind sbx_sandbox_execute_command, _shell
 * and _code.
 *
 * The host makes the descriptors: a pipe per output stream and, when stdin
 * bytes are given, a socketpair for stdin (a socket, not a pipe, so that a
 * command that stops reading cannot raise SIGPIPE in the application: the
 * host writes with MSG_NOSIGNAL). The plugin starts the process with the
 * far ends; the host then polls the read ends, the stdin socket and the
 * plugin's event descriptor in one loop:
 *
 *  - output is handed to the streaming callback as read and kept up to the
 *    per-stream limit; the rest is read and dropped (truncated flag);
 *  - when the event descriptor says the main process ended, exec_wait(0)
 *    collects the exit code and the pipes are drained of what is already in
 *    them, without waiting for EOF: a background descendant may hold the
 *    pipes open and keeps running until the sandbox is destroyed;
 *  - a command run to its end out of process (not
 *    sbx_sandbox_start_process, no terminal) gets an exit socket too
 *    (plugin ABI 1.5,
 *    SBX_PLUGIN_EXEC_EXIT_FD): the plugin, or what it hands it to (the
 *    local supervisor's reaper), writes the end there as an 8-byte record,
 *    polled with the output, so the end needs no exec_wait (out of
 *    process, no round trip to the plugin host). When the event
 *    descriptor fires first, the record gets EXEC_EXIT_RECORD_GRACE_MS to
 *    follow. EOF without a record (a plugin that ignores it, a kill, a
 *    failure to start) closes it, and the end is asked of exec_wait as
 *    below;
 *  - once both pipes are at EOF and stdin is closed (and no exit socket
 *    is open), the loop waits in exec_wait itself (bounded by the
 *    deadline), event descriptor or not: out of process that is one round
 *    trip to the plugin host instead of a wake-up for the event and then a
 *    round trip for exec_wait(0);
 *  - without an event descriptor, before that EOF, it checks exec_wait(0)
 *    on a growing tick;
 *  - at the deadline the process tree gets SIGTERM, SBX_KILL_GRACE_SECS
 *    later SIGKILL; the result is exit code 124 with timed_out set. The
 *    plugin learns when the timeout ends (start_deadline) and starts
 *    nothing after it; a plugin whose process could not be reached to
 *    signal it (a local supervisor stopped or hung: its exec_kill and then
 *    exec_wait fail with a timeout error, PROTO_ANSWER_SECS after the
 *    kill) fails the exec with that error instead, which says whether the
 *    command started (outcome failed: it did not and never will);
 *  - when the calling thread's call scope has a cancel descriptor (an
 *    asynchronous operation's, see sbx_call_scope_set), it is polled too:
 *    once readable, the process tree gets the same SIGTERM, then SIGKILL,
 *    and the exec fails with a cancelled error. The plugin calls made after
 *    that (kill, wait) get a context without the descriptor, so they are
 *    not refused as cancelled themselves. Once SIGKILL is sent (at once
 *    when the cancel comes after it) the loop does not wait for the end:
 *    the handle is freed, which ends what the plugin still runs for it.
 *
 * sbx_exec_run_fds (the file fallbacks' variant) hands the plugin the
 * caller's own stdin and/or stdout descriptor instead: those bytes never
 * pass through this process, and that descriptor is left open.
 *
 * Every descriptor is closed and the process handle freed on every path.
 * The library never waits on processes it did not start (no waitpid(-1))
 * and installs no signal handler.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

#define EXEC_CHUNK (64 * 1024)     /* bytes per read / send */
/* The least default exec timeout once the lifetime is (nearly) over. */
#define EXEC_MIN_DEFAULT_SECS 1.0
#define EXEC_TICK_MIN_MS 5         /* exec_wait(0) tick without an event fd */
#define EXEC_TICK_MAX_MS 200
#define EXEC_KILL_GIVE_UP_SECS 5.0 /* after SIGKILL, stop waiting for the end */
#define EXEC_SPURIOUS_MAX 1000     /* event fd wake-ups without an end */
/* After the event fd fired, how long the exit record may take to follow
 * (the plugin writes it right after what made the event fd readable). */
#define EXEC_EXIT_RECORD_GRACE_MS 50
/* With an exit socket and the output only kept (no callback, no terminal,
 * no interactive stdin): how long after the start the pipes are left
 * unpolled, so that a short command's output is taken with its end, in one
 * wake-up, not in one for the output and one for the end. A command that
 * fills a pipe (64 KiB) sooner waits at most this long, once. */
#define EXEC_OUTPUT_DEFER_MS 2

/* One output stream being read. */
typedef struct exec_stream {
    int fd;                     /* read end; -1 once closed */
    sbx_stream id;
    sbx_buf buf;                /* kept bytes */
    size_t limit;               /* bytes to keep */
    int capture;                /* 0 with SBX_EXEC_NO_CAPTURE */
    int truncated;              /* something was dropped */
} exec_stream;

/* The state of one exec. */
typedef struct exec_state {
    sbx_exec_request rq;        /* the caller's request, normalised */
    const sbx_plugin *plugin;
    sbx_plugin_process *proc;
    sbx_call_ctx ctx;
    double call_end;            /* CLOCK_MONOTONIC end of the start call (the
                                 * client's call timeout); 0 = none */
    exec_stream out[2];         /* stdout, stderr */
    int in_fd;                  /* host end of the stdin socket; -1 when none */
    int given_in;               /* caller's stdin descriptor (borrowed); -1 = none */
    int given_out;              /* caller's stdout descriptor (borrowed); -1 = none */
    int in_open;                /* 1 while stdin bytes remain to send */
    const char *in_data;
    size_t in_left;
    char *chunk;                /* EXEC_CHUNK read buffer */
    int cancel_fd;              /* the call scope's cancel descriptor; -1 = none */
    int cancelled;              /* it became readable */
    /* Interactive stdin (SBX_EXEC_STDIN_OPEN, or a terminal): the socket
     * stays open after the bytes given so far; in_buf holds what the
     * command has not taken yet (in_data points into it). */
    int in_keep;                /* 1 until the caller closes stdin */
    sbx_buf in_buf;
    /* The poll loop's progress, kept between calls (sbx_process_wait). */
    double deadline;            /* monotonic; 0 = none */
    double kill_at, give_up_at, next_check;
    int efd, stage, spurious, tick, code, ended, timed_out, gave_up;
    /* Monotonic time until which the output pipes are not polled (see
     * EXEC_OUTPUT_DEFER_MS); 0 = they are. */
    double out_defer_until;
    /* SBX_PLUGIN_EXEC_EXIT_FD: our end of the exit socket (-1: none, or
     * closed at EOF: ask exec_wait), the plugin's end until the start,
     * and the record read so far. */
    int exit_fd, exit_far;
    unsigned char exit_rec[sizeof(sbx_plugin_exit_record)];
    size_t exit_have;
} exec_state;

/* ---------------------------------------------------------------- requests */

/*
 * Copies the caller's @in into @out (a full, zeroed request), reading only
 * within in->struct_size, and validates it. Returns 0 or -1 with *@err set.
 */
static int
normalize_request(const sbx_exec_request *in, sbx_exec_request *out, sbx_error **err)
{
    size_t min = offsetof(sbx_exec_request, flags);
    size_t n;

    memset(out, 0, sizeof(*out));
    if (!in) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL, "request is NULL");
        return -1;
    }
    if (in->struct_size < min) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                      "request struct_size is %zu, needs at least %zu "
                      "(initialise it with SBX_EXEC_REQUEST_INIT)", in->struct_size, min);
        return -1;
    }
    if (in->struct_size >= offsetof(sbx_exec_request, user) + sizeof(in->user))
        n = offsetof(sbx_exec_request, user) + sizeof(in->user);
    else if (in->struct_size >= offsetof(sbx_exec_request, tty_cols) + sizeof(in->tty_cols))
        n = offsetof(sbx_exec_request, tty_cols) + sizeof(in->tty_cols);
    else if (in->struct_size >= min + sizeof(in->flags))
        n = min + sizeof(in->flags);    /* an older header: no terminal */
    else
        n = min;            /* flags not covered: 0 */
    memcpy(out, in, n);
    out->struct_size = sizeof(*out);
    return 0;
}

/* Validates a normalised request. Returns 0 or -1 with *@err set. */
static int
validate_request(const sbx_exec_request *rq, sbx_error **err)
{
    if (rq->argv && rq->shell) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                      "exactly one of argv and shell must be set, got both");
        return -1;
    }
    if (!rq->argv && !rq->shell) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                      "exactly one of argv and shell must be set, got neither");
        return -1;
    }
    if (rq->argv && !rq->argv[0]) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL, "argv is empty");
        return -1;
    }
    for (size_t i = 0; rq->env && rq->env[i]; i++) {
        const char *entry = rq->env[i], *eq = strchr(entry, '=');
        size_t klen = eq ? (size_t)(eq - entry) : strlen(entry);

        if (!eq || !sbx_env_key_valid_n(entry, klen)) {
            sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                                         eq ? "invalid environment variable name \"%.*s\": "
                                              "must match [A-Za-z_][A-Za-z0-9_]*"
                                            : "invalid env entry \"%.*s\": expected KEY=VALUE",
                                         (int)klen, entry);
            char *key = strndup(entry, klen);

            sbx_error_add_context(e, "name", key);
            free(key);
            return -1;
        }
    }
    if (rq->flags & ~(SBX_EXEC_NO_CAPTURE | SBX_EXEC_STDIN_OPEN)) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL, "unknown flags 0x%x in request",
                      rq->flags & ~(SBX_EXEC_NO_CAPTURE | SBX_EXEC_STDIN_OPEN));
        return -1;
    }
    if (!rq->tty_rows != !rq->tty_cols || rq->tty_rows > SBX_TTY_MAX ||
        rq->tty_cols > SBX_TTY_MAX) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                      "terminal size %u rows x %u columns is invalid (both 1..%u, or both 0 "
                      "for no terminal)", rq->tty_rows, rq->tty_cols, SBX_TTY_MAX);
        return -1;
    }
    if (rq->user) {
        if (!sbx_user_valid(rq->user)) {
            sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                                         "user \"%.256s\" is not a user name or uid (empty, "
                                         "too long, or holding whitespace or control "
                                         "characters)", rq->user);

            sbx_error_add_context(e, "user", rq->user);
            return -1;
        }
    }
    if (isnan(rq->timeout_secs)) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL, "timeout_secs is NaN");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- streams */

/* Hands @len bytes just read from @s to the callback and the buffer. */
static int
stream_deliver(exec_state *st, exec_stream *s, size_t len, sbx_error **err)
{
    if (st->rq.on_output)
        st->rq.on_output(s->id, st->chunk, len, st->rq.user_data);
    if (!s->capture)
        return 0;
    if (s->buf.len < s->limit) {
        size_t room = s->limit - s->buf.len, keep = len < room ? len : room;

        if (sbx_buf_append(&s->buf, st->chunk, keep) < 0) {
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory keeping output");
            return -1;
        }
        if (keep < len)
            s->truncated = 1;
    } else {
        s->truncated = 1;
    }
    return 0;
}

/*
 * One read from @s (at most @max bytes). Returns the bytes read (> 0), 0
 * when nothing is there now or the stream ended (fd then closed), -1 on an
 * error stored in *@err.
 */
static ssize_t
stream_read(exec_state *st, exec_stream *s, size_t max, sbx_error **err)
{
    ssize_t n;

    if (s->fd < 0)
        return 0;
    do
        n = read(s->fd, st->chunk, max < EXEC_CHUNK ? max : EXEC_CHUNK);
    while (n < 0 && errno == EINTR);
    if (n > 0)
        return stream_deliver(st, s, (size_t)n, err) < 0 ? -1 : n;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    sbx_close_fd(&s->fd);     /* EOF, or a read error: the stream is over */
    return 0;
}

/*
 * Reads what is in @s's pipe now, after the main process ended: at most the
 * bytes the pipe held when we started (a background writer cannot keep us
 * here), and never waits.
 */
static int
stream_drain(exec_state *st, exec_stream *s, sbx_error **err)
{
    int avail = 0;
    size_t budget;

    if (s->fd < 0)
        return 0;
    budget = ioctl(s->fd, FIONREAD, &avail) == 0 && avail >= 0 ? (size_t)avail
                                                                : (size_t)EXEC_CHUNK * 16;
    while (budget > 0) {
        ssize_t n = stream_read(st, s, budget, err);

        if (n < 0)
            return -1;
        if (n == 0)
            break;
        budget -= (size_t)n;
    }
    return 0;
}

/* Sends what the stdin socket takes now; half-closes it after the last byte
 * (unless more may come: in_keep) or when the command stopped reading. */
static void
stdin_pump(exec_state *st)
{
    int broken = 0;

    while (st->in_open && st->in_left > 0) {
        size_t len = st->in_left < EXEC_CHUNK ? st->in_left : EXEC_CHUNK;
        ssize_t n = send(st->in_fd, st->in_data, len, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n > 0) {
            st->in_data += n;
            st->in_left -= (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else {
            broken = 1;         /* EPIPE / ECONNRESET: nobody reads any more */
            break;
        }
    }
    if (!st->in_open)
        return;
    if (broken) {
        st->in_left = 0;
        st->in_keep = 0;
    }
    if (st->in_left == 0)
        sbx_buf_clear(&st->in_buf);
    if (st->in_keep)
        return;                 /* more may come: stdin stays open */
    /* The socket stays open until the end (closing it with bytes the
     * command wrote back unread would reset the command's side). */
    shutdown(st->in_fd, SHUT_WR);
    st->in_open = 0;
}

/* ---------------------------------------------------------------- engine */

/* Milliseconds from @now until @when, rounded up, within [0, INT_MAX]. */
static int
ms_until(double when, double now)
{
    double ms = ceil((when - now) * 1000.0);

    if (ms <= 0)
        return 0;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* 1 when the cancel descriptor is readable now. */
static int
cancel_ready(const exec_state *st)
{
    struct pollfd p = { .fd = st->cancel_fd, .events = POLLIN };

    return st->cancel_fd >= 0 && poll(&p, 1, 0) > 0 &&
           (p.revents & (POLLIN | POLLHUP | POLLERR));
}

/* Records the cancellation: the plugin calls that follow (kill, wait) run
 * without the descriptor, and the loop ends the process tree. */
static void
cancel_take(exec_state *st)
{
    st->cancelled = 1;
    st->cancel_fd = -1;
    st->ctx.cancel_fd = -1;
}

/*
 * A plugin wait call failed with *@perr: when that is because the call was
 * cancelled, records the cancellation, frees *@perr and returns 0 (go on:
 * the loop ends the process tree); otherwise hands *@perr to @err and
 * returns -1.
 */
static int
wait_failed(exec_state *st, const char *backend, sbx_error **perr, sbx_error **err)
{
    if (!st->cancelled && cancel_ready(st)) {
        cancel_take(st);
        sbx_error_clear(perr);
        return 0;
    }
    /* Timed out, SIGTERM sent, and then the sandbox ended under the
     * command (a default timeout is what was left of the lifetime: a
     * command that ignores SIGTERM is ended by the sandbox's end, 1 s after
     * its expiry on local, before the grace's SIGKILL): the command was
     * timed out, 124, as the default timeout promised; its output so far
     * is kept. */
    if (st->timed_out && sbx_error_get_code(*perr) == SBX_ERROR_NOT_FOUND) {
        sbx_log(SBX_LOG_INFO, backend, "the sandbox ended while its timed-out command was "
                "being killed (%s): timed out", sbx_error_get0_message(*perr));
        sbx_error_clear(perr);
        st->ended = 1;
        return 0;
    }
    sbx_error_propagate(err, *perr);
    *perr = NULL;
    return -1;
}

/* Sends @sig to the process tree; failures are logged, not fatal. */
static void
exec_signal(exec_state *st, const char *backend, int sig)
{
    int (*kill_fn)(sbx_plugin_process *, const sbx_call_ctx *, int, sbx_error **);
    sbx_error *err = NULL;

    kill_fn = SBX_SLOT(st->plugin, exec_kill);
    if (kill_fn && kill_fn(st->proc, &st->ctx, sig, &err) != 0)
        sbx_log(SBX_LOG_WARNING, backend, "exec_kill(%d) failed: %s", sig,
                err ? sbx_error_get0_message(err) : "no reason given");
    sbx_error_free(err);
}

/* Creates the stdout/stderr pipes and the stdin socketpair; @far receives
 * the plugin's ends (stdin, stdout, stderr). Returns 0 or -1. */
static int
make_fds(exec_state *st, int far[3], sbx_error **err)
{
    for (int i = 0; i < 2; i++) {
        int p[2];

        if (i == 0 && st->given_out >= 0) {
            far[1] = st->given_out;     /* straight to the caller's descriptor */
            continue;
        }
        if (pipe2(p, O_CLOEXEC) < 0)
            goto fail;
        st->out[i].fd = p[0];
        far[i + 1] = p[1];
        /* A new pipe's read end has no status flag to keep: one call. */
        if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0)
            goto fail;
    }
    if (st->given_in >= 0) {
        far[0] = st->given_in;          /* straight from the caller's descriptor */
    } else if (st->rq.stdin_data) {
        int sv[2];

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
            goto fail;
        st->in_fd = sv[0];
        far[0] = sv[1];
        if (sbx_set_nonblock(sv[0]) < 0)
            goto fail;
        st->in_open = 1;
        st->in_data = st->rq.stdin_data;
        st->in_left = st->rq.stdin_len;
    }
    return 0;
fail:
    sbx_set_error(err, sbx_errno_code(errno, SBX_ERROR_EXECUTION_FAILED), NULL,
                  "cannot create exec descriptors: %s", strerror(errno));
    return -1;
}

/*
 * Reads the exit socket: 1 when the plugin's exit record is complete
 * (st->code set), 0 when it is not there yet, or at EOF, a malformed
 * record or an error, after which the socket is closed and the end is
 * asked of exec_wait as without one.
 */
static int
exit_record_read(exec_state *st)
{
    sbx_plugin_exit_record rec;
    ssize_t n;

    if (st->exit_fd < 0)
        return 0;
    do
        n = read(st->exit_fd, st->exit_rec + st->exit_have,
                 sizeof(st->exit_rec) - st->exit_have);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n <= 0) {
        sbx_close_fd(&st->exit_fd);
        return 0;
    }
    st->exit_have += (size_t)n;
    if (st->exit_have < sizeof(st->exit_rec))
        return 0;
    memcpy(&rec, st->exit_rec, sizeof(rec));
    sbx_close_fd(&st->exit_fd);
    if (rec.magic != SBX_PLUGIN_EXIT_RECORD_MAGIC || rec.code < 0 || rec.code > 255)
        return 0;
    st->code = rec.code;
    return 1;
}

/* exec_wait(0): 1 when the main process ended (code stored), 0 when it
 * still runs, -1 on error. */
static int
exec_poll_end(exec_state *st, int *code, sbx_error **err)
{
    int (*wait_fn)(sbx_plugin_process *, const sbx_call_ctx *, int, int *, sbx_error **);

    wait_fn = SBX_SLOT(st->plugin, exec_wait);
    return wait_fn(st->proc, &st->ctx, 0, code, err);
}

/* Sets up the poll loop's state for a process started at @start with
 * @timeout (seconds; <= 0 or infinite: none). */
static void
exec_loop_init(exec_state *st, double timeout, double start)
{
    int (*event_fn)(sbx_plugin_process *);

    event_fn = SBX_SLOT(st->plugin, exec_event_fd);
    st->efd = event_fn ? event_fn(st->proc) : -1;
    st->deadline = timeout > 0 && isfinite(timeout) ? start + timeout : 0;
    st->kill_at = st->give_up_at = st->next_check = 0;
    st->stage = st->spurious = st->code = st->ended = st->timed_out = st->gave_up = 0;
    st->tick = EXEC_TICK_MIN_MS;
    st->out_defer_until = st->exit_fd >= 0 && !st->rq.on_output && !st->in_keep
                          ? start + EXEC_OUTPUT_DEFER_MS / 1000.0 : 0;
}

/* Caps the poll wait @ims (-1 = none) at @until (monotonic; < 0 = none). */
static int
cap_wait(int ims, double until, double now)
{
    int u;

    if (until < 0)
        return ims;
    u = ms_until(until, now);
    return ims < 0 || u < ims ? u : ims;
}

/*
 * Runs the poll loop until the main process ended (or was given up on
 * after SIGKILL), or until @until (monotonic seconds; < 0 = no bound)
 * passed. Returns 1 when it ended (st->code, st->timed_out set), 0 when
 * @until came first, -1 with *@err set.
 */
static int
exec_loop(exec_state *st, const char *backend, double until, sbx_error **err)
{
    int (*wait_fn)(sbx_plugin_process *, const sbx_call_ctx *, int, int *, sbx_error **);
    int rc;
    sbx_error *perr = NULL;

    wait_fn = SBX_SLOT(st->plugin, exec_wait);

    while (!st->ended && !st->gave_up) {
        struct pollfd pfd[6];
        int nfd = 0, ims = -1, iin = -1, iout[2] = { -1, -1 }, iev = -1, icancel = -1;
        int iexit = -1, defer_wake = 0;
        int check = 0;
        double now = sbx_monotonic_now(), wake;

        /* Deadline or cancellation: TERM, then KILL after the grace, then
         * give up. After a signal, ask at once whether the process ended:
         * the kill slot may have taken in the exit notice, so the event fd
         * need not fire. */
        if (st->stage == 0 && (st->cancelled || (st->deadline && now >= st->deadline))) {
            st->timed_out = !st->cancelled;
            st->stage = 1;
            st->kill_at = now + SBX_KILL_GRACE_SECS;
            sbx_log(SBX_LOG_INFO, backend, "command %s: SIGTERM",
                    st->cancelled ? "cancelled" : "timed out");
            exec_signal(st, backend, SIGTERM);
            sbx_log(SBX_LOG_INFO, backend, "SIGTERM sent in %.3f s",
                    sbx_monotonic_now() - now);
            check = 1;
        }
        if (st->stage == 1 && now >= st->kill_at) {
            st->stage = 2;
            st->give_up_at = now + EXEC_KILL_GIVE_UP_SECS;
            sbx_log(SBX_LOG_INFO, backend,
                    "command still running %g s after SIGTERM (stdout %s, stderr %s, exit "
                    "record %s): SIGKILL", SBX_KILL_GRACE_SECS,
                    st->out[0].fd >= 0 ? "open" : "at EOF", st->out[1].fd >= 0 ? "open" : "at EOF",
                    st->exit_fd >= 0 ? "awaited" : "none");
            exec_signal(st, backend, SIGKILL);
            check = 1;
        }
        if (check) {
            if ((rc = exec_poll_end(st, &st->code, &perr)) < 0) {
                if (wait_failed(st, backend, &perr, err) < 0)
                    return -1;
                continue;
            }
            if (rc == 1) {
                st->ended = 1;
                break;
            }
        }
        /* Cancelled, and SIGKILL sent: nothing of it is wanted any more
         * (the result is the cancellation), so the handle is freed now
         * rather than after EXEC_KILL_GIVE_UP_SECS: a plugin whose kill
         * cannot reach the command yet (a remote one its provider has not
         * named) ends its side of it there. */
        if (st->stage == 2 && st->cancelled) {
            sbx_log(SBX_LOG_INFO, backend, "command cancelled, SIGKILL sent: not waiting for "
                    "its end");
            st->gave_up = 1;
            break;
        }
        if (st->stage == 2 && now >= st->give_up_at) {
            sbx_log(SBX_LOG_WARNING, backend, "process did not end after SIGKILL; giving up");
            st->gave_up = 1;
            break;
        }
        if (until >= 0 && now >= until && check == 0) {
            /* One look without waiting, then back to the caller. */
            until = now;
        }
        wake = st->stage == 0 ? st->deadline : st->stage == 1 ? st->kill_at : st->give_up_at;
        if (wake)
            ims = ms_until(wake, now);
        ims = cap_wait(ims, until, now);

        /* Once both pipes are at EOF (and stdin is closed), just
         * wait in the plugin, with an event fd too, as the end comes with
         * the output's EOF or soon after. Out of process that is one round
         * trip to the plugin host that waits there, instead of a wake-up
         * for the event, then a round trip for exec_wait(0). */
        if (st->out[0].fd < 0 && st->out[1].fd < 0 && !st->in_open && st->exit_fd < 0) {
            /* A plugin that does not watch the cancel descriptor itself
             * returns within a tick, and we look at it. */
            if (st->cancel_fd >= 0 && (ims < 0 || ims > EXEC_TICK_MAX_MS))
                ims = EXEC_TICK_MAX_MS;
            if ((rc = wait_fn(st->proc, &st->ctx, ims, &st->code, &perr)) < 0) {
                if (wait_failed(st, backend, &perr, err) < 0)
                    return -1;
                continue;
            }
            st->ended = rc == 1;
            if (!st->ended && cancel_ready(st))
                cancel_take(st);
            if (!st->ended && until >= 0 && sbx_monotonic_now() >= until)
                return 0;
            continue;
        }

        if (st->in_open && st->in_left > 0) {
            iin = nfd;
            pfd[nfd++] = (struct pollfd){ .fd = st->in_fd, .events = POLLOUT };
        }
        /* A short command's output is taken with its end (see
         * EXEC_OUTPUT_DEFER_MS): the exit record wakes us, or the end of
         * the window, which asks nothing of the plugin. */
        if (st->out_defer_until > 0 && (now >= st->out_defer_until || st->exit_fd < 0))
            st->out_defer_until = 0;
        if (st->out_defer_until > 0) {
            int dms = ms_until(st->out_defer_until, now);

            if (ims < 0 || dms < ims) {
                ims = dms;
                defer_wake = 1;
            }
        }
        for (int i = 0; i < 2; i++) {
            if (st->out[i].fd >= 0 && st->out_defer_until == 0) {
                iout[i] = nfd;
                pfd[nfd++] = (struct pollfd){ .fd = st->out[i].fd, .events = POLLIN };
            }
        }
        if (st->efd >= 0) {
            iev = nfd;
            pfd[nfd++] = (struct pollfd){ .fd = st->efd, .events = POLLIN };
        } else if (ims < 0 || ims > st->tick) {
            ims = st->tick;
        }
        if (st->cancel_fd >= 0) {
            icancel = nfd;
            pfd[nfd++] = (struct pollfd){ .fd = st->cancel_fd, .events = POLLIN };
        }
        if (st->exit_fd >= 0) {
            iexit = nfd;
            pfd[nfd++] = (struct pollfd){ .fd = st->exit_fd, .events = POLLIN };
        }

        rc = poll(pfd, (nfds_t)nfd, ims);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            sbx_set_error(err, SBX_ERROR_EXECUTION_FAILED, NULL, "poll failed: %s",
                          strerror(errno));
            return -1;
        }
        if (icancel >= 0 && pfd[icancel].revents) {
            cancel_take(st);
            continue;           /* the top of the loop starts the kill */
        }
        if (rc == 0 && defer_wake)
            continue;           /* the window's end: poll the pipes too */
        if (iin >= 0 && pfd[iin].revents)
            stdin_pump(st);
        for (int i = 0; i < 2; i++)
            if (iout[i] >= 0 && pfd[iout[i]].revents &&
                stream_read(st, &st->out[i], EXEC_CHUNK, err) < 0)
                return -1;

        /* The exit record: the end without asking the plugin. The event
         * fd may fire a moment before it comes (the plugin reports the end
         * there first): wait that moment for it, not a round trip. */
        if (iexit >= 0 && (pfd[iexit].revents ||
                           (iev >= 0 && (pfd[iev].revents & (POLLIN | POLLHUP | POLLERR))))) {
            struct pollfd xp = { .fd = st->exit_fd, .events = POLLIN };
            int xr = 1;

            while (!pfd[iexit].revents &&
                   (xr = poll(&xp, 1, EXEC_EXIT_RECORD_GRACE_MS)) < 0 && errno == EINTR)
                ;
            if (xr == 0)
                sbx_close_fd(&st->exit_fd); /* none comes: ask exec_wait from now on */
            if (exit_record_read(st) == 1) {
                st->ended = 1;
                break;
            }
            if (st->exit_fd >= 0)
                pfd[iexit].revents = 0; /* part of it: the rest is on its way */
        }

        /* Ask whether the main process ended: when the event fd fired, on
         * a timed-out poll (a deadline is due: look before acting), and on
         * the growing tick when the plugin gives no event fd. */
        now = sbx_monotonic_now();
        if (iev >= 0 && (pfd[iev].revents & (POLLIN | POLLHUP | POLLERR))) {
            check = 2;
        } else if (rc == 0) {
            check = 1;
        } else if (st->efd < 0 && now >= st->next_check) {
            check = 1;
        }
        if (st->efd < 0 && check) {
            st->tick = st->tick * 2 > EXEC_TICK_MAX_MS ? EXEC_TICK_MAX_MS : st->tick * 2;
            st->next_check = now + st->tick / 1000.0;
        }
        if (check) {
            if ((rc = exec_poll_end(st, &st->code, &perr)) < 0) {
                if (wait_failed(st, backend, &perr, err) < 0)
                    return -1;
                continue;
            }
            st->ended = rc == 1;
            if (!st->ended && check == 2 && ++st->spurious > EXEC_SPURIOUS_MAX)
                st->efd = -1;   /* a descriptor that never settles: tick instead */
        }
        if (!st->ended && until >= 0 && now >= until)
            return 0;
    }
    if (st->ended && !st->cancelled) {
        /* Everything the main process wrote is in the pipes now. */
        for (int i = 0; i < 2; i++)
            if (stream_drain(st, &st->out[i], err) < 0)
                return -1;
    }
    if (!st->ended || st->timed_out)
        st->code = 124;
    st->ended = 1;
    return 1;
}

/* Drops the host's copies of the plugin's ends of the descriptors; the
 * caller's own descriptors are left open. */
static void
close_far(const exec_state *st, int far[3])
{
    if (far[0] >= 0 && far[0] == st->given_in)
        far[0] = -1;
    if (far[1] >= 0 && far[1] == st->given_out)
        far[1] = -1;
    for (int i = 0; i < 3; i++)
        sbx_close_fd(&far[i]);
}

/* Stores the cancelled error of an exec on @sandbox; @when says at which
 * point ("before it started", "while it ran"). */
static void
cancel_fail(sbx_sandbox *sandbox, sbx_error_outcome outcome, const char *when, sbx_error **err)
{
    sbx_error *e;

    if (sandbox->id[0])
        e = sbx_set_error(err, SBX_ERROR_CANCELLED, NULL, "command cancelled %s in sandbox %s",
                          when, sandbox->id);
    else
        e = sbx_set_error(err, SBX_ERROR_CANCELLED, NULL, "command cancelled %s", when);
    if (sandbox->id[0])
        sbx_error_add_context(e, "sandbox_id", sandbox->id);
    sbx_error_set_outcome(e, outcome);
}

/* Frees what @st holds (the process handle included) and closes every
 * descriptor of it, the caller's own excepted. */
static void
exec_state_clear(exec_state *st, int far[3])
{
    void (*free_fn)(sbx_plugin_process *) = st->plugin ? SBX_SLOT(st->plugin, exec_free) : NULL;

    /* The command's stdin ends first: a plugin that reads it whole before
     * it starts the command (a file it uploads) is then never waiting for
     * more when its free joins that read. */
    sbx_close_fd(&st->in_fd);
    if (st->proc && free_fn)
        free_fn(st->proc);
    st->proc = NULL;
    close_far(st, far);
    for (int i = 0; i < 2; i++) {
        sbx_close_fd(&st->out[i].fd);
        sbx_buf_clear(&st->out[i].buf);
    }
    sbx_close_fd(&st->in_fd);
    sbx_close_fd(&st->exit_fd);
    sbx_close_fd(&st->exit_far);
    sbx_buf_clear(&st->in_buf);
    free(st->chunk);
    st->chunk = NULL;
}

/*
 * Validates @request and starts it (the engine's first half): on success
 * the process runs, st->proc is set, *@start and *@timeout are set and the
 * host's copies of the far ends are closed. @interactive: for
 * sbx_sandbox_start_process (SBX_EXEC_STDIN_OPEN allowed). Returns 0, or -1
 * with *@err set (the caller clears @st either way).
 */
static int
exec_begin(exec_state *st, sbx_sandbox *sandbox, const sbx_exec_request *request,
           int stdin_fd, int stdout_fd, int interactive, int far[3], double *start,
           double *timeout, sbx_error **err)
{
    int (*start_fn)(sbx_plugin_sandbox *, const sbx_call_ctx *,
                    const sbx_plugin_exec_request *, sbx_plugin_process **, sbx_error **);
    sbx_plugin_exec_request preq;
    const char *backend;
    sbx_error *perr = NULL;
    int direct;

    memset(st, 0, sizeof(*st));
    st->in_fd = -1;
    st->cancel_fd = -1;
    st->efd = -1;
    st->exit_fd = st->exit_far = -1;
    st->given_in = stdin_fd >= 0 ? stdin_fd : -1;
    st->given_out = stdout_fd >= 0 ? stdout_fd : -1;
    st->out[0].fd = st->out[1].fd = -1;
    if (normalize_request(request, &st->rq, err) < 0 || validate_request(&st->rq, err) < 0 ||
        sbx_sandbox_check_usable(sandbox, err) < 0)
        return -1;
    backend = sandbox->client->backend;
    if (!interactive && (st->rq.flags & SBX_EXEC_STDIN_OPEN)) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                      "SBX_EXEC_STDIN_OPEN needs a process to write to: start the command "
                      "with sbx_sandbox_start_process()");
        return -1;
    }
    st->plugin = sandbox->client->plugin;
    start_fn = SBX_SLOT(st->plugin, exec_start);
    if (!start_fn || !SBX_SLOT(st->plugin, exec_wait)) {
        sbx_set_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, NULL,
                      "backend \"%s\" cannot execute commands", backend);
        return -1;
    }
    if (st->rq.tty_rows && (!(st->plugin->caps & SBX_CAP_PTY) ||
                            !SBX_SLOT(st->plugin, exec_resize))) {
        sbx_error *e = sbx_set_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, NULL,
                                     "backend \"%s\" cannot run commands on a terminal "
                                     "(tty %ux%u requested)", backend, st->rq.tty_rows,
                                     st->rq.tty_cols);

        sbx_error_add_context(e, "backend", backend);
        return -1;
    }

    /* The default is what is left of the sandbox's lifetime (at least
     * EXEC_MIN_DEFAULT_SECS): a command never outlives its sandbox's
     * lifetime by its own timeout. */
    *timeout = st->rq.timeout_secs > 0 ? st->rq.timeout_secs
               : st->rq.timeout_secs == 0 ? sandbox->timeout_secs : -1;
    if (st->rq.timeout_secs == 0 && sandbox->expires_mono > 0) {
        *timeout = sandbox->expires_mono - sbx_monotonic_now();
        if (*timeout < EXEC_MIN_DEFAULT_SECS)
            *timeout = EXEC_MIN_DEFAULT_SECS;
    }
    for (int i = 0; i < 2; i++) {
        st->out[i].id = i == 0 ? SBX_STREAM_STDOUT : SBX_STREAM_STDERR;
        st->out[i].limit = st->rq.output_limit ? st->rq.output_limit : SBX_DEFAULT_OUTPUT_LIMIT;
        st->out[i].capture = !(st->rq.flags & SBX_EXEC_NO_CAPTURE);
    }
    st->chunk = malloc(EXEC_CHUNK);
    if (!st->chunk) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        return -1;
    }
    /* Interactive stdin: a socket that stays open for later writes. On a
     * terminal stdin is typed, never ended by itself (^D is the user's). */
    if (st->given_in < 0 && ((st->rq.flags & SBX_EXEC_STDIN_OPEN) ||
                             (st->rq.tty_rows && (interactive || st->rq.stdin_data)))) {
        st->in_keep = 1;
        if (!st->rq.stdin_data) {
            st->rq.stdin_data = "";
            st->rq.stdin_len = 0;
        }
    }
    if (interactive && st->rq.stdin_data && st->rq.stdin_len > 0) {
        /* Borrowed for the call only: the process keeps a copy. */
        if (sbx_buf_append(&st->in_buf, st->rq.stdin_data, st->rq.stdin_len) < 0) {
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
            return -1;
        }
        st->rq.stdin_data = st->in_buf.data;
    }
    if (make_fds(st, far, err) < 0)
        return -1;

    memset(&preq, 0, sizeof(preq));
    preq.struct_size = sizeof(preq);
    preq.argv = st->rq.argv;
    preq.shell = st->rq.shell;
    preq.env = st->rq.env;
    preq.cwd = st->rq.cwd;
    preq.user = st->rq.user;
    preq.tty_rows = st->rq.tty_rows;
    preq.tty_cols = st->rq.tty_cols;
    preq.stdin_fd = far[0];
    preq.stdout_fd = far[1];
    preq.stderr_fd = far[2];
    /* Run to the end: a failure to start may come from exec_wait; and when
     * nothing reads the output before the end, it may arrive at the end. */
    preq.flags = interactive ? 0 : SBX_PLUGIN_EXEC_START_UNCONFIRMED;
    if (!interactive && !st->rq.on_output && st->given_out < 0 && !st->rq.tty_rows)
        preq.flags |= SBX_PLUGIN_EXEC_OUTPUT_AT_END;
    preq.exit_fd = -1;
    /* Out of process, a command that runs to its end in the sandbox's own
     * working directory, as its own user, goes straight to the process
     * that serves the sandbox where the plugin names one (direct.c): no
     * plugin host on its way. It reads the end from that connection, as in
     * process: no exit socket (with one, measured slower, bench/README.md). */
    direct = !interactive && !st->rq.tty_rows && !st->rq.cwd && !st->rq.user &&
             sbx_direct_usable(sandbox);
    /* Run to the end out of process: the end may come on a socket of its
     * own, read here with the output, instead of from exec_wait (one round
     * trip to the plugin host fewer per exec). In process exec_wait costs
     * no round trip, and the socket's three system calls would be all the
     * difference. */
    if (!direct && !interactive && !st->rq.tty_rows && st->plugin->abi_minor >= 5 &&
        sandbox->client->mode == SBX_PLUGIN_MODE_OUT_OF_PROCESS) {
        int sv[2];

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0) {
            sbx_set_error(err, sbx_errno_code(errno, SBX_ERROR_EXECUTION_FAILED), NULL,
                          "cannot create exec descriptors: %s", strerror(errno));
            return -1;
        }
        st->exit_fd = sv[0];
        st->exit_far = sv[1];
        preq.exit_fd = sv[1];
        preq.flags |= SBX_PLUGIN_EXEC_EXIT_FD;
    }
    sbx_call_ctx_init(&st->ctx);
    st->cancel_fd = st->ctx.cancel_fd;
    if (cancel_ready(st)) {
        cancel_fail(sandbox, SBX_ERROR_OUTCOME_FAILED, "before it started", err);
        return -1;
    }

    *start = sbx_monotonic_now();
    /* Once the timeout ends (or the call's deadline comes) nobody waits for
     * the command: it must not start after that (a supervisor stopped
     * meanwhile would run it once continued, long after the caller was
     * told it ended). */
    if (*timeout > 0 && isfinite(*timeout))
        preq.start_deadline = *start + *timeout;
    if (st->ctx.deadline > 0
        && (preq.start_deadline == 0 || st->ctx.deadline < preq.start_deadline))
        preq.start_deadline = st->ctx.deadline;
    /* The start is one slot call, which the client's call timeout bounds
     * on every path (out of process the plugin host applies it as well). */
    sbx_call_ctx sctx = st->ctx;
    st->call_end = sandbox->client->call_timeout > 0 ? *start + sandbox->client->call_timeout
                                                     : 0;
    if (st->call_end > 0) {
        if (preq.start_deadline == 0 || st->call_end < preq.start_deadline)
            preq.start_deadline = st->call_end;
        if (sctx.deadline <= 0 || st->call_end < sctx.deadline)
            sctx.deadline = st->call_end;
    }
    if (direct && sbx_direct_exec_start(sandbox, &sctx, &preq, &st->proc) == 0) {
        st->plugin = sbx_direct_plugin();
    } else if (start_fn(sandbox->handle, &sctx, &preq, &st->proc, &perr) != 0) {
        st->proc = NULL;
        if (cancel_ready(st)) {
            /* The plugin saw the cancellation (and refused or undid the
             * start); report it as what it is. */
            sbx_error_free(perr);
            cancel_fail(sandbox, SBX_ERROR_OUTCOME_UNKNOWN, "while it started", err);
            return -1;
        }
        sbx_error_ensure(&perr, backend, "exec_start");
        sbx_error_propagate(err, perr);
        return -1;
    }
    /* The plugin dup()ed what it keeps: drop our copies of its ends so EOF
     * arrives when the command's side closes. */
    close_far(st, far);
    sbx_close_fd(&st->exit_far);
    if (st->in_open && st->in_left == 0)
        stdin_pump(st);
    return 0;
}

/* A new result of the exec in @st, ended; its buffers are taken. NULL
 * with *@err set when out of memory. */
static sbx_result *
exec_result(exec_state *st, double start, sbx_error **err)
{
    sbx_result *res = sbx_result_new();

    if (!res) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        return NULL;
    }
    res->duration_secs = sbx_monotonic_now() - start;
    res->exit_code = st->code;
    res->timed_out = st->timed_out;
    res->out_truncated = st->out[0].truncated;
    res->err_truncated = st->out[1].truncated;
    if (sbx_result_take_output(res, SBX_STREAM_STDOUT, &st->out[0].buf) < 0 ||
        sbx_result_take_output(res, SBX_STREAM_STDERR, &st->out[1].buf) < 0) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        sbx_result_free(res);
        return NULL;
    }
    return res;
}

/*
 * A command that its supervisor took in only after the command's timeout
 * had passed was refused and never ran (a supervisor stopped or starved
 * meanwhile: the error's "reason" is "start_deadline"). When that timeout
 * was the command's own, not the call's deadline, it is what any command
 * that outlives its timeout is: a result, timed out, exit code 124, no
 * output, and *@err cleared; as every backend reports it. Else NULL,
 * *@err kept, its message naming the call's deadline when that came
 * first (the start call's: the client's call timeout; or the caller's).
 */
static sbx_result *
late_start_result(const exec_state *st, const sbx_sandbox *sandbox, double start,
                  double timeout, sbx_error **err)
{
    const char *reason;
    sbx_result *res;

    if (!err || !*err || sbx_error_get_code(*err) != SBX_ERROR_TIMEOUT
        || !(reason = sbx_error_get0_context(*err, "reason"))
        || strcmp(reason, "start_deadline") != 0)
        return NULL;
    if (!(timeout > 0) || !isfinite(timeout) || start <= 0
        || (st->ctx.deadline > 0 && st->ctx.deadline < start + timeout)
        || (st->call_end > 0 && st->call_end < start + timeout)) {
        /* The call's deadline came before the command's timeout: the
         * error says so, whichever path refused the command. */
        if (st->call_end > 0 && (st->ctx.deadline <= 0 || st->call_end <= st->ctx.deadline))
            sbx_error_set_message(*err, "the supervisor of sandbox %s took the command in "
                                  "only after the start call's deadline (the client's call "
                                  "timeout, %g s): it did not start", sandbox->id,
                                  sandbox->client->call_timeout);
        else
            sbx_error_set_message(*err, "the supervisor of sandbox %s took the command in "
                                  "only after the call's deadline: it did not start",
                                  sandbox->id);
        return NULL;
    }
    if (!(res = sbx_result_new()))
        return NULL;
    res->exit_code = 124;
    res->timed_out = 1;
    res->duration_secs = sbx_monotonic_now() - start;
    sbx_error_clear(err);
    return res;
}

/* The engine; @stdin_fd / @stdout_fd as sbx_exec_run_fds. */
static sbx_result *
exec_run(sbx_sandbox *sandbox, const sbx_exec_request *request, int stdin_fd, int stdout_fd,
         sbx_error **err)
{
    exec_state st;
    sbx_result *res = NULL;
    int far[3] = { -1, -1, -1 };
    double timeout = 0, start = 0;

    if (exec_begin(&st, sandbox, request, stdin_fd, stdout_fd, 0, far, &start, &timeout,
                   err) < 0)
        goto out;
    exec_loop_init(&st, timeout, start);
    if (exec_loop(&st, sandbox->client->backend, -1, err) < 0) {
        sbx_error_ensure(err, sandbox->client->backend, "exec_wait");
        goto out;
    }
    if (st.cancelled) {
        cancel_fail(sandbox, SBX_ERROR_OUTCOME_UNKNOWN, "while it ran", err);
        goto out;
    }
    res = exec_result(&st, start, err);
    /* How it ended beyond the exit code (the memory limit's kills); only
     * for a process that ended (a timed-out one may have been given up). */
    if (res && !st.timed_out && SBX_SLOT(st.plugin, exec_end_info)) {
        int (*info_fn)(sbx_plugin_process *, const sbx_call_ctx *, uint64_t *, sbx_error **) =
            SBX_SLOT(st.plugin, exec_end_info);
        uint64_t flags = 0;
        sbx_call_ctx ictx;
        sbx_error *perr = NULL;

        sbx_call_ctx_init(&ictx);
        if (info_fn(st.proc, &ictx, &flags, &perr) != 0) {
            sbx_error_ensure(&perr, sandbox->client->backend, "exec_wait");
            sbx_error_propagate(err, perr);
            sbx_result_free(res);
            res = NULL;
        } else {
            res->oom_killed = (flags & SBX_PLUGIN_EXEC_OOM_KILLED) != 0;
        }
    }
out:
    if (!res)
        res = late_start_result(&st, sandbox, start, timeout, err);
    exec_state_clear(&st, far);
    return res;
}

sbx_result *
sbx_exec_run(sbx_sandbox *sandbox, const sbx_exec_request *request, sbx_error **err)
{
    return exec_run(sandbox, request, -1, -1, err);
}

sbx_result *
sbx_exec_run_fds(sbx_sandbox *sandbox, const sbx_exec_request *request, int stdin_fd,
                 int stdout_fd, sbx_error **err)
{
    return exec_run(sandbox, request, stdin_fd, stdout_fd, err);
}

/* ---------------------------------------------------------------- public */

/* Fills backend and op into @err and hands it to the caller. */
static void
exec_finish_error(sbx_error **error, sbx_error *err, sbx_sandbox *sandbox, const char *op)
{
    sbx_error_fill(err, sandbox ? sandbox->client->backend : NULL, op);
    /* A sandbox found gone (its lifetime over) leaves no row behind. */
    sbx_sandbox_note_gone(sandbox, err);
    sbx_error_propagate(error, err);
}

/* ---------------------------------------------------------------- processes */

struct sbx_process {
    exec_state st;
    sbx_sandbox *sandbox;       /* borrowed: outlives the process */
    int far[3];
    double start, end;          /* monotonic */
    int epfd;                   /* sbx_process_get_fd; -1 when none */
    int in_watched;             /* the stdin socket is in epfd (for EPOLLOUT) */
    int stdin_was_open;
};

/* Puts @fd into the process's epoll set for @events (0: takes it out). */
static void
process_watch(sbx_process *p, int fd, uint32_t events, int *watched)
{
    struct epoll_event ev = { .events = events, .data.fd = fd };

    if (p->epfd < 0 || fd < 0)
        return;
    if (events && !*watched) {
        if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
            *watched = 1;
    } else if (!events && *watched) {
        epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL);
        *watched = 0;
    }
}

/* Keeps the stdin socket in the epoll set exactly while bytes wait. */
static void
process_watch_stdin(sbx_process *p)
{
    exec_state *st = &p->st;

    process_watch(p, st->in_fd, st->in_open && st->in_left > 0 ? EPOLLOUT : 0,
                  &p->in_watched);
}

SBX_EXPORT sbx_process *
sbx_sandbox_start_process(sbx_sandbox *sandbox, const sbx_exec_request *request,
                          sbx_error **error)
{
    sbx_process *p = calloc(1, sizeof(*p));
    sbx_error *err = NULL;
    double timeout = 0;
    int unused = 0;

    if (!p) {
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        exec_finish_error(error, err, sandbox, "start_process");
        return NULL;
    }
    p->far[0] = p->far[1] = p->far[2] = -1;
    p->epfd = -1;
    p->sandbox = sandbox;
    if (!sandbox) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "sandbox is NULL");
        goto fail;
    }
    if (exec_begin(&p->st, sandbox, request, -1, -1, 1, p->far, &p->start, &timeout, &err) < 0)
        goto fail;
    exec_loop_init(&p->st, timeout, p->start);
    p->stdin_was_open = p->st.in_keep;
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < 2; i++)
        process_watch(p, p->st.out[i].fd, EPOLLIN, &unused), unused = 0;
    process_watch(p, p->st.efd, EPOLLIN, &unused);
    process_watch_stdin(p);
    return p;
fail:
    exec_state_clear(&p->st, p->far);
    exec_finish_error(error, err, sandbox, "start_process");
    free(p);
    return NULL;
}

/* Fails @op on @p with invalid_argument @msg. */
static int
process_refuse(sbx_process *p, const char *op, const char *msg, sbx_error **error)
{
    sbx_error *err = NULL;

    sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "%s", msg);
    exec_finish_error(error, err, p ? p->sandbox : NULL, op);
    return -1;
}

SBX_EXPORT int
sbx_process_write_stdin(sbx_process *p, const void *data, size_t len, sbx_error **error)
{
    static const char op[] = "process_write_stdin";
    exec_state *st;
    size_t off;

    if (!p)
        return process_refuse(NULL, op, "process is NULL", error);
    st = &p->st;
    if (!data && len > 0)
        return process_refuse(p, op, "data is NULL", error);
    if (!p->stdin_was_open)
        return process_refuse(p, op, "the process's stdin is not open (start it with "
                              "SBX_EXEC_STDIN_OPEN or a terminal)", error);
    if (!st->in_keep)
        return process_refuse(p, op, "the process's stdin is closed", error);
    if (!st->in_open || st->ended || len == 0)
        return 0;           /* nobody reads any more: dropped */
    off = st->in_left > 0 ? (size_t)(st->in_data - st->in_buf.data) : 0;
    if (st->in_left == 0)
        st->in_buf.len = 0;
    if (sbx_buf_append(&st->in_buf, data, len) < 0) {
        sbx_error *err = NULL;

        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory queueing stdin");
        exec_finish_error(error, err, p->sandbox, op);
        return -1;
    }
    st->in_data = st->in_buf.data + off;
    st->in_left += len;
    stdin_pump(st);
    process_watch_stdin(p);
    return 0;
}

SBX_EXPORT int
sbx_process_close_stdin(sbx_process *p, sbx_error **error)
{
    static const char op[] = "process_close_stdin";

    if (!p)
        return process_refuse(NULL, op, "process is NULL", error);
    if (!p->stdin_was_open)
        return process_refuse(p, op, "the process's stdin was never open (start it with "
                              "SBX_EXEC_STDIN_OPEN or a terminal)", error);
    if (!p->st.in_keep)
        return 0;
    p->st.in_keep = 0;
    if (p->st.in_open && p->st.in_left == 0)
        stdin_pump(&p->st);
    process_watch_stdin(p);
    return 0;
}

SBX_EXPORT int
sbx_process_resize(sbx_process *p, unsigned rows, unsigned cols, sbx_error **error)
{
    static const char op[] = "process_resize";
    int (*resize_fn)(sbx_plugin_process *, const sbx_call_ctx *, unsigned, unsigned,
                     sbx_error **);
    sbx_error *err = NULL;
    char num[32];

    if (!p)
        return process_refuse(NULL, op, "process is NULL", error);
    if (!p->st.rq.tty_rows)
        return process_refuse(p, op, "the process has no terminal to resize (start it "
                              "with tty_rows and tty_cols)", error);
    if (rows == 0 || cols == 0 || rows > SBX_TTY_MAX || cols > SBX_TTY_MAX) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                                     "terminal size %u rows x %u columns is invalid "
                                     "(each 1..%u)", rows, cols, SBX_TTY_MAX);

        snprintf(num, sizeof(num), "%ux%u", rows, cols);
        sbx_error_add_context(e, "size", num);
        exec_finish_error(error, err, p->sandbox, op);
        return -1;
    }
    if (p->st.ended)
        return 0;
    resize_fn = SBX_SLOT(p->st.plugin, exec_resize);
    if (resize_fn(p->st.proc, &p->st.ctx, rows, cols, &err) != 0) {
        sbx_error_ensure(&err, p->sandbox->client->backend, "exec_resize");
        exec_finish_error(error, err, p->sandbox, op);
        return -1;
    }
    return 0;
}

SBX_EXPORT int
sbx_process_wait(sbx_process *p, double timeout_secs, int *exit_code, sbx_result **result,
                 sbx_error **error)
{
    static const char op[] = "process_wait";
    sbx_error *err = NULL;
    int rc;

    if (result)
        *result = NULL;
    if (!p)
        return process_refuse(NULL, op, "process is NULL", error);
    if (isnan(timeout_secs))
        return process_refuse(p, op, "timeout_secs is NaN", error);
    if (!p->st.ended) {
        double until = timeout_secs < 0 ? -1 : sbx_monotonic_now() + timeout_secs;

        rc = exec_loop(&p->st, p->sandbox->client->backend, until, &err);
        process_watch_stdin(p);
        if (rc < 0) {
            sbx_error_ensure(&err, p->sandbox->client->backend, "exec_wait");
            exec_finish_error(error, err, p->sandbox, op);
            return -1;
        }
        if (rc == 0)
            return 0;
        p->end = sbx_monotonic_now();
    }
    if (exit_code)
        *exit_code = p->st.code;
    if (result) {
        /* Each result gets a copy: the process keeps its buffers. */
        sbx_buf keep[2] = { { 0 }, { 0 } };
        sbx_result *res;

        for (int i = 0; i < 2; i++)
            if (sbx_buf_append(&keep[i], p->st.out[i].buf.data ? p->st.out[i].buf.data : "",
                               p->st.out[i].buf.len) < 0)
                goto nomem;
        res = sbx_result_new();
        if (!res)
            goto nomem;
        res->duration_secs = p->end - p->start;
        res->exit_code = p->st.code;
        res->timed_out = p->st.timed_out;
        res->out_truncated = p->st.out[0].truncated;
        res->err_truncated = p->st.out[1].truncated;
        if (sbx_result_take_output(res, SBX_STREAM_STDOUT, &keep[0]) < 0 ||
            sbx_result_take_output(res, SBX_STREAM_STDERR, &keep[1]) < 0) {
            sbx_result_free(res);
            goto nomem;
        }
        *result = res;
        goto done;
nomem:
        sbx_buf_clear(&keep[0]);
        sbx_buf_clear(&keep[1]);
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        exec_finish_error(error, err, p->sandbox, op);
        return -1;
    }
done:
    return 1;
}

SBX_EXPORT int
sbx_process_get_fd(sbx_process *p)
{
    return p ? p->epfd : -1;
}

SBX_EXPORT int
sbx_process_kill(sbx_process *p, int signal, sbx_error **error)
{
    static const char op[] = "process_kill";
    int (*kill_fn)(sbx_plugin_process *, const sbx_call_ctx *, int, sbx_error **);
    sbx_error *err = NULL;

    if (!p)
        return process_refuse(NULL, op, "process is NULL", error);
    if (signal <= 0 || signal >= NSIG) {
        char num[16];
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                                     "invalid signal %d (1..%d)", signal, NSIG - 1);

        snprintf(num, sizeof(num), "%d", signal);
        sbx_error_add_context(e, "signal", num);
        exec_finish_error(error, err, p->sandbox, op);
        return -1;
    }
    if (p->st.ended)
        return 0;
    kill_fn = SBX_SLOT(p->st.plugin, exec_kill);
    if (!kill_fn) {
        sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, NULL,
                      "backend \"%s\" cannot signal commands", p->sandbox->client->backend);
        exec_finish_error(error, err, p->sandbox, op);
        return -1;
    }
    if (kill_fn(p->st.proc, &p->st.ctx, signal, &err) != 0) {
        sbx_error_ensure(&err, p->sandbox->client->backend, "exec_kill");
        exec_finish_error(error, err, p->sandbox, op);
        return -1;
    }
    return 0;
}

SBX_EXPORT void
sbx_process_free(sbx_process *p)
{
    if (!p)
        return;
    exec_state_clear(&p->st, p->far);
    sbx_close_fd(&p->epfd);
    free(p);
}

SBX_EXPORT sbx_result *
sbx_sandbox_execute_command(sbx_sandbox *sandbox, const sbx_exec_request *request,
                            sbx_error **error)
{
    sbx_error *err = NULL;
    sbx_result *res = sbx_exec_run(sandbox, request, &err);

    if (!res)
        exec_finish_error(error, err, sandbox, "execute_command");
    return res;
}

SBX_EXPORT sbx_result *
sbx_sandbox_execute_shell(sbx_sandbox *sandbox, const char *script, sbx_error **error)
{
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    sbx_error *err = NULL;
    sbx_result *res;

    if (!script) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "script is NULL");
        exec_finish_error(error, err, sandbox, "execute_command");
        return NULL;
    }
    rq.shell = script;
    res = sbx_exec_run(sandbox, &rq, &err);
    if (!res)
        exec_finish_error(error, err, sandbox, "execute_command");
    return res;
}

/* The python launcher: python3, falling back to python, as the reference
 * does; the code is passed as $1, never spliced into the script. Used when
 * output streams to a callback; otherwise python3 runs directly (no shell
 * in between) and python only after python3 was not found. */
static const char python_script[] =
    "if command -v python3 >/dev/null 2>&1; then exec python3 -c \"$1\"; "
    "else exec python -c \"$1\"; fi";

/* 1 when @res is the report of argv[0] @prog not found: exit 127, no
 * stdout, and stderr one line holding "PROG: not found" or "PROG: command
 * not found" after its start or a space (local prints "python3: command
 * not found", a POSIX shell "sh: 1: exec: python3: not found"). */
static int program_not_found(const sbx_result *res, const char *prog)
{
    static const char *const tails[] = { ": not found\n", ": command not found\n" };
    size_t out_len, err_len, plen = strlen(prog);
    const char *err;

    sbx_result_get0_stdout(res, &out_len);
    err = sbx_result_get0_stderr(res, &err_len);
    if (sbx_result_get_exit_code(res) != 127 || out_len != 0 || err_len == 0 || err_len > 256
        || memchr(err, '\n', err_len - 1) != NULL)
        return 0;
    for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
        size_t tlen = strlen(tails[i]);
        if (err_len < plen + tlen || memcmp(err + err_len - tlen, tails[i], tlen) != 0)
            continue;
        size_t at = err_len - tlen - plen;
        if (memcmp(err + at, prog, plen) == 0 && (at == 0 || err[at - 1] == ' '))
            return 1;
    }
    return 0;
}

/* The languages execute_code runs, by name ("shell", "js" and "ts" are
 * aliases): those of the reference, whose Daytona backend adds typescript,
 * ruby and go to python and javascript; each entry's interpreter is chosen
 * in execute_code. */
static const char *const code_languages[] = {
    "python", "bash", "sh", "shell", "node", "javascript", "js", "typescript", "ts", "ruby",
    "go", NULL
};

/* The TypeScript compiler options Daytona's code toolbox gives ts-node: a
 * snippet runs as a CommonJS module, so require() works in it. */
static const char ts_node_options[] = "{\"module\":\"CommonJS\"}";

/* Go builds a file, not an argument: the code ($1) is written to main.go
 * in a directory of its own, `go build` makes the program there (its
 * errors on stderr, exit 1) and the program runs with the command's stdin,
 * stdout and stderr; the directory is removed and the program's own exit
 * code is the command's (not `go run`'s, which is 1 for any failure and
 * adds an "exit status N" line to stderr). */
static const char go_script[] =
    "d=$(mktemp -d \"${TMPDIR:-/tmp}/sbx-go-XXXXXX\") || exit 1; "
    "printf '%s' \"$1\" >\"$d/main.go\" && go build -o \"$d/main\" \"$d/main.go\" && "
    "\"$d/main\"; s=$?; rm -rf \"$d\"; exit $s";

/* Sets the unknown-language error on *@err with @op (NULL: the caller's
 * fills it in). */
static void unknown_language(sbx_error **err, const char *language, const char *op)
{
    sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, op,
                                 "unknown language \"%s\" (known: python, bash, sh, "
                                 "node, javascript, typescript, ruby, go)", language);
    sbx_error_add_context(e, "language", language);
}

SBX_EXPORT int
sbx_code_language_check(const char *language, sbx_error **error)
{
    if (!language)
        return 0;
    for (size_t i = 0; code_languages[i]; i++)
        if (strcmp(language, code_languages[i]) == 0)
            return 0;
    unknown_language(error, language, "execute_code");
    return -1;
}

SBX_EXPORT sbx_result *
sbx_sandbox_execute_code(sbx_sandbox *sandbox, const char *language, const char *code,
                         const sbx_exec_request *request, sbx_error **error)
{
    static const char op[] = "execute_code";
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    const char *argv[6];
    sbx_error *err = NULL;
    sbx_result *res;

    if (!code) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "code is NULL");
        goto fail;
    }
    int python_direct = 0;
    if (!language || strcmp(language, "python") == 0) {
        if (request && request->on_output) {
            argv[0] = "/bin/sh";
            argv[1] = "-c";
            argv[2] = python_script;
            argv[3] = "sbx-code";
            argv[4] = code;
            argv[5] = NULL;
        } else {
            argv[0] = "python3";
            argv[1] = "-c";
            argv[2] = code;
            argv[3] = NULL;
            python_direct = 1;
        }
    } else if (strcmp(language, "bash") == 0) {
        argv[0] = "bash";
        argv[1] = "-c";
        argv[2] = code;
        argv[3] = NULL;
    } else if (strcmp(language, "sh") == 0 || strcmp(language, "shell") == 0) {
        argv[0] = "/bin/sh";
        argv[1] = "-c";
        argv[2] = code;
        argv[3] = NULL;
    } else if (strcmp(language, "node") == 0 || strcmp(language, "javascript") == 0 ||
               strcmp(language, "js") == 0) {
        argv[0] = "node";
        argv[1] = "-e";
        argv[2] = code;
        argv[3] = NULL;
    } else if (strcmp(language, "typescript") == 0 || strcmp(language, "ts") == 0) {
        argv[0] = "ts-node";
        argv[1] = "-O";
        argv[2] = ts_node_options;
        argv[3] = "-e";
        argv[4] = code;
        argv[5] = NULL;
    } else if (strcmp(language, "ruby") == 0) {
        argv[0] = "ruby";
        argv[1] = "-e";
        argv[2] = code;
        argv[3] = NULL;
    } else if (strcmp(language, "go") == 0) {
        argv[0] = "/bin/sh";
        argv[1] = "-c";
        argv[2] = go_script;
        argv[3] = "sbx-code";
        argv[4] = code;
        argv[5] = NULL;
    } else {
        unknown_language(&err, language, NULL);
        goto fail;
    }
    if (request) {
        if (normalize_request(request, &rq, &err) < 0)
            goto fail;
        if (rq.argv || rq.shell) {
            sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                          "execute_code takes the command from the code: request argv "
                          "and shell must be NULL");
            goto fail;
        }
    }
    rq.argv = argv;
    res = sbx_exec_run(sandbox, &rq, &err);
    if (res && python_direct && program_not_found(res, "python3")) {
        sbx_result_free(res);
        argv[0] = "python";
        res = sbx_exec_run(sandbox, &rq, &err);
    }
    if (res)
        return res;
fail:
    exec_finish_error(error, err, sandbox, op);
    return NULL;
}
