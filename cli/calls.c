/*
 * Stop signals and the library calls they interrupt (cli.h).
 *
 * The handlers (set once, in main) only record the signal and wake the
 * main thread through a pipe. A library call that may block runs as an
 * operation of a one-worker sbx_async pool while the main thread waits for
 * it or for a stop signal; on a signal the operation is cancelled
 * (sbx_op_cancel: an exec's processes end, a transfer stops and the
 * library removes its staging files). A call that has not returned within
 * its grace is left behind: its cleanup removes what it may have left on
 * this host and sbx exits at once. Either way the exit status is 128+N
 * for signal N.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

volatile sig_atomic_t cli_signal;
static int g_signal_pipe[2] = { -1, -1 };

static void on_signal(int signo)
{
    int saved = errno;
    char c = 1;
    ssize_t n;

    if (cli_signal == 0)
        cli_signal = signo;
    if (g_signal_pipe[1] >= 0) {
        n = write(g_signal_pipe[1], &c, 1);
        (void)n;
    }
    errno = saved;
}

/* A handler rather than SIG_IGN: a caught signal is reset to the default in
 * the programs the library starts, an ignored one would be inherited. */
static void on_sigpipe(int signo)
{
}

void cli_signals_install(void)
{
    static const int stop_signals[] = { SIGINT, SIGTERM, SIGHUP };
    struct sigaction sa, old;
    size_t i;

    if (pipe(g_signal_pipe) == 0) {
        for (i = 0; i < 2; i++) {
            fcntl(g_signal_pipe[i], F_SETFD, FD_CLOEXEC);
            fcntl(g_signal_pipe[i], F_SETFL, O_NONBLOCK);
        }
    } else {
        g_signal_pipe[0] = g_signal_pipe[1] = -1;
    }

    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_signal;
    for (i = 0; i < sizeof stop_signals / sizeof stop_signals[0]; i++) {
        /* A signal ignored by whoever started us stays ignored. */
        if (sigaction(stop_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        sigaction(stop_signals[i], &sa, NULL);
    }
    sa.sa_handler = on_sigpipe;
    sigaction(SIGPIPE, &sa, NULL);
}

int cli_signal_fd(void)
{
    return g_signal_pipe[0];
}

void cli_drain_fd(int fd)
{
    char buf[64];

    while (read(fd, buf, sizeof buf) > 0)
        ;
}

const char *cli_signal_name(int signo)
{
    switch (signo) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
    }
}

/* --------------------------------------------------------------- calls */

void cli_outcome_clear(cli_outcome *o)
{
    if (o->sandbox != NULL) {
        sbx_sandbox_destroy(o->sandbox, NULL);
        sbx_sandbox_free(o->sandbox);
    }
    sbx_error_free(o->error);
    sbx_result_free(o->result);
    sbx_file_info_list_free(o->list, o->count);
    memset(o, 0, sizeof *o);
}

int cli_outcome_fail(cli_outcome *o)
{
    cli_error(o->error);
    o->error = NULL;
    cli_outcome_clear(o);
    return CLI_EXIT_TOOL;
}

static void on_op_done(sbx_op *op, void *user_data)
{
    cli_outcome *o = user_data;

    o->done = 1;
    o->error = sbx_op_steal_error(op);
    o->result = sbx_op_steal_result(op);
    o->list = sbx_op_steal_file_list(op, &o->count);
    o->value = sbx_op_get_int64(op);
    /* A cancelled create's sandbox is left to the library, which destroys
     * it before the pool is freed. */
    if (o->error == NULL || sbx_error_get_code(o->error) != SBX_ERROR_CANCELLED)
        o->sandbox = sbx_op_steal_sandbox(op);
}

/* Submits @c to @async. */
static sbx_op *submit(sbx_async *async, const cli_call *c, cli_outcome *out,
                      sbx_error **error)
{
    switch (c->kind) {
    case CLI_CALL_EXEC:
        return sbx_sandbox_execute_command_async(async, c->sandbox, c->request, on_op_done,
                                                 out, error);
    case CLI_CALL_LIST:
        return sbx_sandbox_list_files_async(async, c->sandbox, c->sandbox_path, on_op_done,
                                            out, error);
    case CLI_CALL_UPLOAD_FILE:
        return sbx_sandbox_upload_file_async(async, c->sandbox, c->local_path,
                                             c->sandbox_path, on_op_done, out, error);
    case CLI_CALL_UPLOAD_DIR:
        return sbx_sandbox_upload_dir_async(async, c->sandbox, c->local_path,
                                            c->sandbox_path, on_op_done, out, error);
    case CLI_CALL_DOWNLOAD_FILE:
        return sbx_sandbox_download_file_async(async, c->sandbox, c->sandbox_path,
                                               c->local_path, on_op_done, out, error);
    case CLI_CALL_DOWNLOAD_DIR:
        return sbx_sandbox_download_dir_async(async, c->sandbox, c->sandbox_path,
                                              c->local_path, on_op_done, out, error);
    case CLI_CALL_CREATE:
        return sbx_create_async(async, c->backend, c->options, on_op_done, out, error);
    case CLI_CALL_DESTROY:
        return sbx_sandbox_destroy_async(async, c->sandbox, on_op_done, out, error);
    }
    abort();   /* not a cli_call_kind: a bug */
}

static double monotonic_secs(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cli_call_run(const cli_call *call, cli_outcome *out)
{
    double grace = call->grace > 0 ? call->grace : CLI_CANCEL_GRACE_SECS;
    sbx_error *error = NULL;
    sbx_async *async;
    sbx_op *op;
    double deadline = 0;
    int cancelled = 0;

    memset(out, 0, sizeof *out);
    if (cli_signal != 0) {
        cli_msg("%s received; %s was not started", cli_signal_name(cli_signal), call->what);
        return 128 + cli_signal;
    }
    async = sbx_async_new(1, &error);
    if (async == NULL) {
        cli_error(error);
        return CLI_EXIT_TOOL;
    }
    op = submit(async, call, out, &error);
    if (op == NULL) {
        cli_error(error);
        sbx_async_free(async);
        return CLI_EXIT_TOOL;
    }
    while (!out->done) {
        struct pollfd pfd[2];
        int timeout = -1;

        pfd[0].fd = sbx_async_get_fd(async);
        pfd[0].events = POLLIN;
        pfd[1].fd = g_signal_pipe[0];
        pfd[1].events = POLLIN;
        if (cancelled) {
            double left = deadline - monotonic_secs();

            timeout = left > 0 ? (int)(left * 1000) + 1 : 0;
        } else if (g_signal_pipe[0] < 0) {
            timeout = 100;
        }
        if (poll(pfd, 2, timeout) > 0) {
            if (pfd[1].revents & POLLIN)
                cli_drain_fd(g_signal_pipe[0]);
            if (pfd[0].revents & POLLIN)
                sbx_async_dispatch(async);
        }
        if (out->done)
            break;
        if (cli_signal != 0 && !cancelled) {
            sbx_op_cancel(op);
            cancelled = 1;
            deadline = monotonic_secs() + grace;
        } else if (cancelled && monotonic_secs() >= deadline) {
            /* The call ignores its cancellation: leave it behind. */
            cli_msg("%s received; %s was cancelled", cli_signal_name(cli_signal), call->what);
            if (call->cleanup != NULL)
                call->cleanup(call->cleanup_arg);
            fflush(stdout);
            _exit(128 + cli_signal);
        }
    }
    sbx_async_free(async);
    if (cancelled && call->kind == CLI_CALL_DESTROY && out->error != NULL &&
        sbx_error_get_code(out->error) == SBX_ERROR_CANCELLED) {
        const char *done = sbx_error_get0_context(out->error, "completed");

        if (done != NULL && strcmp(done, "true") == 0) {
            /* The destroy finished before its cancellation could stop it:
             * the sandbox is gone, which the caller records. */
            sbx_error_free(out->error);
            out->error = NULL;
            return 0;
        }
    }
    if (cancelled || (cli_signal != 0 && out->error != NULL &&
                      sbx_error_get_code(out->error) == SBX_ERROR_CANCELLED)) {
        cli_outcome_clear(out);
        cli_msg("%s received; %s was cancelled", cli_signal_name(cli_signal), call->what);
        return 128 + cli_signal;
    }
    return 0;
}
