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
 *  - without an event descriptor the loop waits for EOF on both pipes, then
 *    for the process, and checks exec_wait(0) on a growing tick meanwhile;
 *  - at the deadline the process tree gets SIGTERM, SBX_KILL_GRACE_SECS
 *    later SIGKILL; the result is exit code 124 with timed_out set;
 *  - when the calling thread's call scope has a cancel descriptor (an
 *    asynchronous operation's, see sbx_call_scope_set), it is polled too:
 *    once readable, the process tree gets the same SIGTERM, then SIGKILL,
 *    and the exec fails with a cancelled error. The plugin calls made after
 *    that (kill, wait) get a context without the descriptor, so they are
 *    not refused as cancelled themselves.
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
#include <stdlib.h>
#include <string.h>
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
    if (in->struct_size >= sizeof(*out))
        n = sizeof(*out);
    else if (in->struct_size >= min + sizeof(in->flags))
        n = min + sizeof(in->flags);
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
                                         eq ? "invalid environment variable name \"%.*s\""
                                            : "invalid env entry \"%.*s\": expected KEY=VALUE",
                                         (int)klen, entry);
            char *key = strndup(entry, klen);

            sbx_error_add_context(e, "name", key);
            free(key);
            return -1;
        }
    }
    if (rq->flags & ~SBX_EXEC_NO_CAPTURE) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL, "unknown flags 0x%x in request",
                      rq->flags & ~SBX_EXEC_NO_CAPTURE);
        return -1;
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
 * or when the command stopped reading. */
static void
stdin_pump(exec_state *st)
{
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
            break;              /* EPIPE / ECONNRESET: nobody reads any more */
        }
    }
    if (st->in_open) {
        /* The socket stays open until the end (closing it with bytes the
         * command wrote back unread would reset the command's side). */
        shutdown(st->in_fd, SHUT_WR);
        st->in_open = 0;
    }
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
wait_failed(exec_state *st, sbx_error **perr, sbx_error **err)
{
    if (!st->cancelled && cancel_ready(st)) {
        cancel_take(st);
        sbx_error_clear(perr);
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
        if (sbx_set_nonblock(p[0]) < 0)
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
    sbx_set_error(err, SBX_ERROR_EXECUTION_FAILED, NULL, "cannot create exec descriptors: %s",
                  strerror(errno));
    return -1;
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

/*
 * Runs the poll loop until the main process ended (or was given up on
 * after SIGKILL). Stores the exit code and timed_out flag. Returns 0 or -1
 * with *@err set.
 */
static int
exec_loop(exec_state *st, const char *backend, double timeout, double start,
          int *exit_code, int *timed_out, sbx_error **err)
{
    int (*wait_fn)(sbx_plugin_process *, const sbx_call_ctx *, int, int *, sbx_error **);
    int (*event_fn)(sbx_plugin_process *);
    double deadline = timeout > 0 && isfinite(timeout) ? start + timeout : 0;
    double kill_at = 0, give_up_at = 0, next_check = 0;
    int efd, ended = 0, stage = 0, spurious = 0, tick = EXEC_TICK_MIN_MS, code = 0, rc;
    sbx_error *perr = NULL;

    wait_fn = SBX_SLOT(st->plugin, exec_wait);
    event_fn = SBX_SLOT(st->plugin, exec_event_fd);
    efd = event_fn ? event_fn(st->proc) : -1;
    *timed_out = 0;

    while (!ended) {
        struct pollfd pfd[5];
        int nfd = 0, ims = -1, iin = -1, iout[2] = { -1, -1 }, iev = -1, icancel = -1;
        int check = 0;
        double now = sbx_monotonic_now(), wake;

        /* Deadline or cancellation: TERM, then KILL after the grace, then
         * give up. After a signal, ask at once whether the process ended:
         * the kill slot may have taken in the exit notice, so the event fd
         * need not fire. */
        if (stage == 0 && (st->cancelled || (deadline && now >= deadline))) {
            *timed_out = !st->cancelled;
            stage = 1;
            kill_at = now + SBX_KILL_GRACE_SECS;
            exec_signal(st, backend, SIGTERM);
            check = 1;
        }
        if (stage == 1 && now >= kill_at) {
            stage = 2;
            give_up_at = now + EXEC_KILL_GIVE_UP_SECS;
            exec_signal(st, backend, SIGKILL);
            check = 1;
        }
        if (check) {
            if ((rc = exec_poll_end(st, &code, &perr)) < 0) {
                if (wait_failed(st, &perr, err) < 0)
                    return -1;
                continue;
            }
            if (rc == 1) {
                ended = 1;
                break;
            }
        }
        if (stage == 2 && now >= give_up_at) {
            sbx_log(SBX_LOG_WARNING, backend, "process did not end after SIGKILL; giving up");
            break;
        }
        wake = stage == 0 ? deadline : stage == 1 ? kill_at : give_up_at;
        if (wake)
            ims = ms_until(wake, now);

        /* Without an event fd, once both pipes are at EOF, just wait. */
        if (efd < 0 && st->out[0].fd < 0 && st->out[1].fd < 0) {
            /* A plugin that does not watch the cancel descriptor itself
             * returns within a tick, and we look at it. */
            if (st->cancel_fd >= 0 && (ims < 0 || ims > EXEC_TICK_MAX_MS))
                ims = EXEC_TICK_MAX_MS;
            if ((rc = wait_fn(st->proc, &st->ctx, ims, &code, &perr)) < 0) {
                if (wait_failed(st, &perr, err) < 0)
                    return -1;
                continue;
            }
            ended = rc == 1;
            if (!ended && cancel_ready(st))
                cancel_take(st);
            continue;
        }

        if (st->in_open) {
            iin = nfd;
            pfd[nfd++] = (struct pollfd){ .fd = st->in_fd, .events = POLLOUT };
        }
        for (int i = 0; i < 2; i++) {
            if (st->out[i].fd >= 0) {
                iout[i] = nfd;
                pfd[nfd++] = (struct pollfd){ .fd = st->out[i].fd, .events = POLLIN };
            }
        }
        if (efd >= 0) {
            iev = nfd;
            pfd[nfd++] = (struct pollfd){ .fd = efd, .events = POLLIN };
        } else if (ims < 0 || ims > tick) {
            ims = tick;
        }
        if (st->cancel_fd >= 0) {
            icancel = nfd;
            pfd[nfd++] = (struct pollfd){ .fd = st->cancel_fd, .events = POLLIN };
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
        if (iin >= 0 && pfd[iin].revents)
            stdin_pump(st);
        for (int i = 0; i < 2; i++)
            if (iout[i] >= 0 && pfd[iout[i]].revents &&
                stream_read(st, &st->out[i], EXEC_CHUNK, err) < 0)
                return -1;

        /* Ask whether the main process ended: when the event fd fired, on
         * a timed-out poll (a deadline is due: look before acting), and on
         * the growing tick when the plugin gives no event fd. */
        now = sbx_monotonic_now();
        if (iev >= 0 && (pfd[iev].revents & (POLLIN | POLLHUP | POLLERR))) {
            check = 2;
        } else if (rc == 0) {
            check = 1;
        } else if (efd < 0 && now >= next_check) {
            check = 1;
        }
        if (efd < 0 && check) {
            tick = tick * 2 > EXEC_TICK_MAX_MS ? EXEC_TICK_MAX_MS : tick * 2;
            next_check = now + tick / 1000.0;
        }
        if (check) {
            if ((rc = exec_poll_end(st, &code, &perr)) < 0) {
                if (wait_failed(st, &perr, err) < 0)
                    return -1;
                continue;
            }
            ended = rc == 1;
            if (!ended && check == 2 && ++spurious > EXEC_SPURIOUS_MAX)
                efd = -1;       /* a descriptor that never settles: tick instead */
        }
    }
    if (ended && !st->cancelled) {
        /* Everything the main process wrote is in the pipes now. */
        for (int i = 0; i < 2; i++)
            if (stream_drain(st, &st->out[i], err) < 0)
                return -1;
    }
    *exit_code = ended && !*timed_out ? code : 124;
    return 0;
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

/* The engine; @stdin_fd / @stdout_fd as sbx_exec_run_fds. */
static sbx_result *
exec_run(sbx_sandbox *sandbox, const sbx_exec_request *request, int stdin_fd, int stdout_fd,
         sbx_error **err)
{
    int (*start_fn)(sbx_plugin_sandbox *, const sbx_call_ctx *,
                    const sbx_plugin_exec_request *, sbx_plugin_process **, sbx_error **);
    void (*free_fn)(sbx_plugin_process *);
    sbx_plugin_exec_request preq;
    exec_state st;
    const char *backend;
    sbx_result *res = NULL;
    sbx_error *perr = NULL;
    int far[3] = { -1, -1, -1 };
    int exit_code = 0, timed_out = 0;
    double timeout, start;

    memset(&st, 0, sizeof(st));
    st.in_fd = -1;
    st.cancel_fd = -1;
    st.given_in = stdin_fd >= 0 ? stdin_fd : -1;
    st.given_out = stdout_fd >= 0 ? stdout_fd : -1;
    st.out[0].fd = st.out[1].fd = -1;
    if (normalize_request(request, &st.rq, err) < 0 || validate_request(&st.rq, err) < 0 ||
        sbx_sandbox_check_usable(sandbox, err) < 0)
        return NULL;
    backend = sandbox->client->backend;
    st.plugin = sandbox->client->plugin;
    start_fn = SBX_SLOT(st.plugin, exec_start);
    free_fn = SBX_SLOT(st.plugin, exec_free);
    if (!start_fn || !SBX_SLOT(st.plugin, exec_wait)) {
        sbx_set_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, NULL,
                      "backend \"%s\" cannot execute commands", backend);
        return NULL;
    }

    /* The default is what is left of the sandbox's lifetime (at least
     * EXEC_MIN_DEFAULT_SECS): a command never outlives its sandbox's
     * lifetime by its own timeout. */
    timeout = st.rq.timeout_secs > 0 ? st.rq.timeout_secs
              : st.rq.timeout_secs == 0 ? sandbox->timeout_secs : -1;
    if (st.rq.timeout_secs == 0 && sandbox->expires_mono > 0) {
        timeout = sandbox->expires_mono - sbx_monotonic_now();
        if (timeout < EXEC_MIN_DEFAULT_SECS)
            timeout = EXEC_MIN_DEFAULT_SECS;
    }
    for (int i = 0; i < 2; i++) {
        st.out[i].id = i == 0 ? SBX_STREAM_STDOUT : SBX_STREAM_STDERR;
        st.out[i].limit = st.rq.output_limit ? st.rq.output_limit : SBX_DEFAULT_OUTPUT_LIMIT;
        st.out[i].capture = !(st.rq.flags & SBX_EXEC_NO_CAPTURE);
    }
    res = sbx_result_new();
    st.chunk = malloc(EXEC_CHUNK);
    if (!res || !st.chunk) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        goto fail;
    }
    if (make_fds(&st, far, err) < 0)
        goto fail;

    memset(&preq, 0, sizeof(preq));
    preq.struct_size = sizeof(preq);
    preq.argv = st.rq.argv;
    preq.shell = st.rq.shell;
    preq.env = st.rq.env;
    preq.cwd = st.rq.cwd;
    preq.user = NULL;
    preq.stdin_fd = far[0];
    preq.stdout_fd = far[1];
    preq.stderr_fd = far[2];
    sbx_call_ctx_init(&st.ctx);
    st.cancel_fd = st.ctx.cancel_fd;
    if (cancel_ready(&st)) {
        cancel_fail(sandbox, SBX_ERROR_OUTCOME_FAILED, "before it started", err);
        goto fail;
    }

    start = sbx_monotonic_now();
    if (start_fn(sandbox->handle, &st.ctx, &preq, &st.proc, &perr) != 0) {
        st.proc = NULL;
        if (cancel_ready(&st)) {
            /* The plugin saw the cancellation (and refused or undid the
             * start); report it as what it is. */
            sbx_error_free(perr);
            cancel_fail(sandbox, SBX_ERROR_OUTCOME_UNKNOWN, "while it started", err);
            goto fail;
        }
        sbx_error_ensure(&perr, backend, "exec_start");
        sbx_error_propagate(err, perr);
        goto fail;
    }
    /* The plugin dup()ed what it keeps: drop our copies of its ends so EOF
     * arrives when the command's side closes. */
    close_far(&st, far);
    if (st.in_open && st.in_left == 0)
        stdin_pump(&st);

    if (exec_loop(&st, backend, timeout, start, &exit_code, &timed_out, err) < 0) {
        sbx_error_ensure(err, backend, "exec_wait");
        goto fail;
    }
    if (st.cancelled) {
        cancel_fail(sandbox, SBX_ERROR_OUTCOME_UNKNOWN, "while it ran", err);
        goto fail;
    }
    /* How it ended beyond the exit code (the memory limit's kills); only
     * for a process that ended (a timed-out one may have been given up). */
    if (!timed_out && SBX_SLOT(st.plugin, exec_end_info)) {
        int (*info_fn)(sbx_plugin_process *, const sbx_call_ctx *, uint64_t *, sbx_error **) =
            SBX_SLOT(st.plugin, exec_end_info);
        uint64_t flags = 0;
        sbx_call_ctx ictx;

        sbx_call_ctx_init(&ictx);
        if (info_fn(st.proc, &ictx, &flags, &perr) != 0) {
            sbx_error_ensure(&perr, backend, "exec_wait");
            sbx_error_propagate(err, perr);
            goto fail;
        }
        res->oom_killed = (flags & SBX_PLUGIN_EXEC_OOM_KILLED) != 0;
    }
    res->duration_secs = sbx_monotonic_now() - start;
    res->exit_code = exit_code;
    res->timed_out = timed_out;
    res->out_truncated = st.out[0].truncated;
    res->err_truncated = st.out[1].truncated;
    if (sbx_result_take_output(res, SBX_STREAM_STDOUT, &st.out[0].buf) < 0 ||
        sbx_result_take_output(res, SBX_STREAM_STDERR, &st.out[1].buf) < 0) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        goto fail;
    }
    goto out;

fail:
    sbx_result_free(res);
    res = NULL;
out:
    if (st.proc && free_fn)
        free_fn(st.proc);
    close_far(&st, far);
    for (int i = 0; i < 2; i++) {
        sbx_close_fd(&st.out[i].fd);
        sbx_buf_clear(&st.out[i].buf);
    }
    sbx_close_fd(&st.in_fd);
    free(st.chunk);
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
    } else {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                                     "unknown language \"%s\" (known: python, bash, sh, "
                                     "node, javascript)", language);
        sbx_error_add_context(e, "language", language);
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
