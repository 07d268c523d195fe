/*
 * test_process.c — sbx_process, a command the caller drives while it runs:
 *
 * - stdin open (SBX_EXEC_STDIN_OPEN): bytes written reach the command,
 *   close_stdin gives it EOF, the exit code is the command's; on a backend
 *   with SBX_CAP_EXEC_STDIN_STREAM a line comes back before the next is
 *   written, and the descriptor polls readable on the answer to a line
 *   while stdin is still open; on one without it, the same bytes arrive
 *   whole once stdin is closed (sbx.h), and the same exact output and
 *   exit code are checked after the close;
 * - on a terminal (tty_rows/tty_cols): `stty size` shows the size asked
 *   for, a resize shows the new one and SIGWINCH reaches the command,
 *   output arrives as stdout only, a typed ^C interrupts the command, the
 *   command's stdin/stdout/stderr are its controlling terminal, kill ends
 *   it with 128+N;
 * - kill ends the command (128+N), wait with a timeout returns 0 while it
 *   runs, the descriptor polls readable when output arrives;
 * - the request's timeout ends a process (exit code 124, timed_out);
 * - bad input: write without open stdin, resize without a terminal, bad
 *   sizes and signals, STDIN_OPEN to execute_command; each names it.
 *
 * Runs on SBX_TEST_BACKEND (default local), in the plugin mode of
 * SBX_PLUGIN_MODE (scripts/test runs it both ways); from the build
 * directory with the variables of `make check`.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sbx/sbx.h>

#include "testutil.h"

static sbx_client *g_client;
static sbx_sandbox *g_sb;

typedef struct sink {
    char out[65536];
    size_t out_len;
    char err[65536];
    size_t err_len;
} sink;

static sink g_sink;

static void on_output(sbx_stream stream, const void *data, size_t len, void *user_data)
{
    sink *s = user_data;
    char *buf = stream == SBX_STREAM_STDOUT ? s->out : s->err;
    size_t *n = stream == SBX_STREAM_STDOUT ? &s->out_len : &s->err_len;

    if (*n + len >= sizeof(s->out))
        len = sizeof(s->out) - 1 - *n;
    memcpy(buf + *n, data, len);
    *n += len;
    buf[*n] = '\0';
}

static void setup(void)
{
    sbx_error *err = NULL;

    memset(&g_sink, 0, sizeof(g_sink));
    g_client = sbx_client_new(tu_backend(), &err);
    cr_assert_null(err, "sbx_client_new(%s): %s", tu_backend(),
                   err ? sbx_error_get0_message(err) : "");
    g_sb = tu_create(g_client, NULL);
}

static void teardown(void)
{
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    sbx_client_free(g_client);
    g_client = NULL;
}

TestSuite(process, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(tty, .init = setup, .fini = teardown, .timeout = 60);

/* 1 when the backend declares SBX_CAP_EXEC_STDIN_STREAM (a configured
 * client's capabilities, sbx_client_probe()). */
static int stdin_streams(void)
{
    uint64_t caps = 0;
    sbx_error *err = NULL;

    cr_assert_eq(sbx_client_probe(g_client, &caps, &err), 0, "probe: %s",
                 err ? sbx_error_get0_message(err) : "");
    return (caps & SBX_CAP_EXEC_STDIN_STREAM) != 0;
}

/* Asserts @err has @code and exactly @msg, and context @key = @value
 * when @key is not NULL. */
static void assert_err(const sbx_error *err, sbx_error_code code, const char *msg,
                       const char *key, const char *value)
{
    cr_assert_not_null(err, "no error (wanted \"%s\")", msg);
    cr_assert_eq(sbx_error_get_code(err), code, "code %d for \"%s\"",
                 (int)sbx_error_get_code(err), sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err), msg);
    if (key)
        cr_assert_str_eq(sbx_error_get0_context(err, key) ? sbx_error_get0_context(err, key) : "",
                         value);
}

static sbx_process *start(const char *script, unsigned rows, unsigned cols, unsigned flags)
{
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    sbx_error *err = NULL;
    sbx_process *p;

    rq.shell = script;
    rq.on_output = on_output;
    rq.user_data = &g_sink;
    rq.tty_rows = rows;
    rq.tty_cols = cols;
    rq.flags = flags;
    rq.timeout_secs = 30;
    p = sbx_sandbox_start_process(g_sb, &rq, &err);
    cr_assert_null(err, "start_process(%s): %s", script,
                   err ? sbx_error_get0_message(err) : "");
    cr_assert_not_null(p);
    return p;
}

/* Waits for the process to end (within 20 s); returns its exit code. */
static int wait_end(sbx_process *p)
{
    sbx_error *err = NULL;
    int code = -1;
    int rc = sbx_process_wait(p, 20, &code, NULL, &err);

    cr_assert_null(err, "process_wait: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(rc, 1, "the process did not end within 20 s (output so far: \"%s\")",
                 g_sink.out);
    return code;
}

/* Pumps the process until stdout holds @want (within 15 s). */
static void wait_for_output(sbx_process *p, const char *want)
{
    double end = tu_now() + 15;
    sbx_error *err = NULL;

    while (!strstr(g_sink.out, want)) {
        int rc = sbx_process_wait(p, 0.05, NULL, NULL, &err);

        cr_assert_null(err, "process_wait: %s", err ? sbx_error_get0_message(err) : "");
        cr_assert(rc == 0 || strstr(g_sink.out, want),
                  "the process ended before \"%s\" came; stdout: \"%s\"", want, g_sink.out);
        cr_assert(tu_now() < end, "no \"%s\" within 15 s; stdout: \"%s\"", want, g_sink.out);
    }
}

static void write_str(sbx_process *p, const char *s)
{
    sbx_error *err = NULL;

    cr_assert_eq(sbx_process_write_stdin(p, s, strlen(s), &err), 0, "write_stdin: %s",
                 err ? sbx_error_get0_message(err) : "");
}

Test(process, stdin_open_write_then_close)
{
    sbx_process *p = start("cat; echo end; exit 3", 0, 0, SBX_EXEC_STDIN_OPEN);
    sbx_error *err = NULL;
    sbx_result *res = NULL;
    int code = -1;

    write_str(p, "first\n");
    if (stdin_streams())
        wait_for_output(p, "first\n");
    write_str(p, "second\n");
    cr_assert_eq(sbx_process_close_stdin(p, &err), 0);
    cr_assert_eq(sbx_process_close_stdin(p, &err), 0, "closing twice is a no-op");
    cr_assert_eq(wait_end(p), 3);
    cr_assert_str_eq(g_sink.out, "first\nsecond\nend\n");
    cr_assert_eq(g_sink.err_len, 0);
    /* Ended: the same answer again, with a result. */
    cr_assert_eq(sbx_process_wait(p, 0, &code, &res, &err), 1);
    cr_assert_eq(code, 3);
    cr_assert_not_null(res);
    tu_assert_exit(res, 3);
    tu_assert_stdout(res, "first\nsecond\nend\n");
    sbx_result_free(res);
    cr_assert_eq(sbx_process_write_stdin(p, "x", 1, &err), -1);
    assert_err(err, SBX_ERROR_INVALID_ARGUMENT, "the process's stdin is closed",
               NULL, NULL);
    sbx_error_free(err);
    sbx_process_free(p);
}

Test(process, stdin_data_then_open)
{
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    sbx_error *err = NULL;
    char data[] = "given ";
    sbx_process *p;

    rq.shell = "cat";
    rq.on_output = on_output;
    rq.user_data = &g_sink;
    rq.stdin_data = data;
    rq.stdin_len = strlen(data);
    rq.flags = SBX_EXEC_STDIN_OPEN;
    p = sbx_sandbox_start_process(g_sb, &rq, &err);
    cr_assert_null(err);
    memset(data, 'X', strlen(data));    /* borrowed for the call only */
    write_str(p, "written");
    cr_assert_eq(sbx_process_close_stdin(p, &err), 0);
    cr_assert_eq(wait_end(p), 0);
    cr_assert_str_eq(g_sink.out, "given written");
    sbx_process_free(p);
}

Test(process, no_stdin_open_means_eof)
{
    sbx_process *p = start("cat; echo done", 0, 0, 0);
    sbx_error *err = NULL;

    cr_assert_eq(wait_end(p), 0);
    cr_assert_str_eq(g_sink.out, "done\n");
    cr_assert_eq(sbx_process_write_stdin(p, "x", 1, &err), -1);
    assert_err(err, SBX_ERROR_INVALID_ARGUMENT,
                    "the process's stdin is not open (start it with SBX_EXEC_STDIN_OPEN or a "
                    "terminal)", NULL, NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_process_close_stdin(p, &err), -1);
    assert_err(err, SBX_ERROR_INVALID_ARGUMENT,
                    "the process's stdin was never open (start it with SBX_EXEC_STDIN_OPEN or "
                    "a terminal)", NULL, NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_process_resize(p, 10, 10, &err), -1);
    assert_err(err, SBX_ERROR_INVALID_ARGUMENT,
                    "the process has no terminal to resize (start it with tty_rows and "
                    "tty_cols)", NULL, NULL);
    sbx_error_free(err);
    sbx_process_free(p);
}

Test(process, kill_and_wait_timeout)
{
    sbx_process *p = start("echo up; exec sleep 30", 0, 0, 0);
    sbx_error *err = NULL;
    double t0;
    int code = -1;

    wait_for_output(p, "up\n");
    t0 = tu_now();
    cr_assert_eq(sbx_process_wait(p, 0.3, &code, NULL, &err), 0, "sleep 30 still runs");
    cr_assert_null(err);
    cr_assert_geq(tu_now() - t0, 0.29, "wait(0.3) returned after %.3f s", tu_now() - t0);
    cr_assert_eq(code, -1, "no exit code while it runs");
    cr_assert_eq(sbx_process_kill(p, 0, &err), -1);
    assert_err(err, SBX_ERROR_INVALID_ARGUMENT, "invalid signal 0 (1..64)",
                    "signal", "0");
    sbx_error_clear(&err);
    cr_assert_eq(sbx_process_kill(p, SIGKILL, &err), 0);
    cr_assert_eq(wait_end(p), 128 + SIGKILL);
    cr_assert_eq(sbx_process_kill(p, SIGKILL, &err), 0, "killing an ended process succeeds");
    sbx_process_free(p);
}

Test(process, fd_polls_readable_on_output)
{
    sbx_process *p = start("read line; echo \"got $line\"", 0, 0, SBX_EXEC_STDIN_OPEN);
    struct pollfd pf = { .fd = sbx_process_get_fd(p), .events = POLLIN };
    double end = tu_now() + 15;
    sbx_error *err = NULL;

    cr_assert_geq(pf.fd, 0);
    cr_assert_eq(poll(&pf, 1, 200), 0, "nothing to do before input");
    write_str(p, "abc\n");
    /* Staged stdin reaches the command once it is closed. */
    if (!stdin_streams())
        cr_assert_eq(sbx_process_close_stdin(p, &err), 0);
    while (!strstr(g_sink.out, "got abc\n") && tu_now() < end) {
        cr_assert_geq(poll(&pf, 1, 15000), 1, "the descriptor never became readable");
        cr_assert_geq(sbx_process_wait(p, 0, NULL, NULL, &err), 0);
    }
    cr_assert_str_eq(g_sink.out, "got abc\n");
    cr_assert_eq(wait_end(p), 0);
    sbx_process_free(p);
}

Test(process, request_timeout_ends_it)
{
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    sbx_error *err = NULL;
    sbx_result *res = NULL;
    sbx_process *p;
    int code = -1;

    rq.shell = "sleep 30";
    rq.timeout_secs = 0.5;
    p = sbx_sandbox_start_process(g_sb, &rq, &err);
    cr_assert_null(err);
    cr_assert_eq(sbx_process_wait(p, 20, &code, &res, &err), 1);
    cr_assert_eq(code, 124);
    cr_assert_eq(sbx_result_is_timed_out(res), 1);
    sbx_result_free(res);
    sbx_process_free(p);
}

Test(process, bad_requests)
{
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    sbx_error *err = NULL;

    rq.shell = "true";
    rq.flags = SBX_EXEC_STDIN_OPEN;
    cr_assert_null(sbx_sandbox_execute_command(g_sb, &rq, &err));
    assert_err(err, SBX_ERROR_INVALID_ARGUMENT,
                    "SBX_EXEC_STDIN_OPEN needs a process to write to: start the command with "
                    "sbx_sandbox_start_process()", NULL, NULL);
    sbx_error_clear(&err);
    rq.flags = 0;
    rq.tty_rows = 24;
    cr_assert_null(sbx_sandbox_start_process(g_sb, &rq, &err));
    assert_err(err, SBX_ERROR_INVALID_ARGUMENT,
                    "terminal size 24 rows x 0 columns is invalid (both 1..65535, or both 0 "
                    "for no terminal)", NULL, NULL);
    sbx_error_clear(&err);
    rq.tty_cols = 70000;
    cr_assert_null(sbx_sandbox_start_process(g_sb, &rq, &err));
    assert_err(err, SBX_ERROR_INVALID_ARGUMENT,
                    "terminal size 24 rows x 70000 columns is invalid (both 1..65535, or both 0 "
                    "for no terminal)", NULL, NULL);
    sbx_error_free(err);
}

/* ---------------------------------------------------------------- terminal */

Test(tty, size_resize_and_winch)
{
    sbx_process *p = start("trap 'echo WINCH' WINCH; stty size; echo ready; read x; stty size",
                           33, 77, 0);
    sbx_error *err = NULL;

    wait_for_output(p, "ready");
    cr_assert(strstr(g_sink.out, "33 77\r\n"), "stty size: \"%s\"", g_sink.out);
    cr_assert_eq(sbx_process_resize(p, 40, 100, &err), 0, "resize: %s",
                 err ? sbx_error_get0_message(err) : "");
    wait_for_output(p, "WINCH");
    write_str(p, "\r");
    cr_assert_eq(wait_end(p), 0);
    cr_assert(strstr(g_sink.out, "40 100\r\n"), "stty size after resize: \"%s\"", g_sink.out);
    cr_assert_eq(g_sink.err_len, 0, "a terminal merges the streams: stderr \"%s\"", g_sink.err);
    cr_assert_eq(sbx_process_resize(p, 0, 5, &err), -1);
    assert_err(err, SBX_ERROR_INVALID_ARGUMENT,
                    "terminal size 0 rows x 5 columns is invalid (each 1..65535)",
                    "size", "0x5");
    sbx_error_free(err);
    sbx_process_free(p);
}

Test(tty, controlling_terminal_and_echo)
{
    sbx_process *p = start("test -t 0 && test -t 1 && test -t 2 && echo tty; "
                           "echo err >&2; read line; echo \"line=$line\"; exit 7",
                           24, 80, 0);

    wait_for_output(p, "err");
    write_str(p, "hello\r");
    cr_assert_eq(wait_end(p), 7);
    /* The terminal echoes what is typed and writes "\r\n" for "\n". */
    cr_assert_str_eq(g_sink.out, "tty\r\nerr\r\nhello\r\nline=hello\r\n");
    cr_assert_eq(g_sink.err_len, 0);
    sbx_process_free(p);
}

Test(tty, ctrl_c_interrupts_the_command)
{
    /* "go" comes from a child shell that then becomes sleep, so a ^C right
     * after it ends the child whether or not it is sleep yet (a ^C that
     * reached the trapping shell between its echo and its sleep would let
     * the whole sleep run). */
    sbx_process *p = start("trap 'echo INT' INT; sh -c 'echo go; exec sleep 30'; echo after",
                           24, 80, 0);
    double t0;

    wait_for_output(p, "go\r\n");
    t0 = tu_now();
    write_str(p, "\003");
    cr_assert_eq(wait_end(p), 0);
    cr_assert_lt(tu_now() - t0, 10, "^C did not end sleep 30");
    cr_assert(strstr(g_sink.out, "INT\r\nafter\r\n"), "stdout: \"%s\"", g_sink.out);
    sbx_process_free(p);
}

Test(tty, close_stdin_hangs_up)
{
    sbx_process *p = start("trap 'echo HUP; exit 9' HUP; echo go; while :; do sleep 1; done",
                           24, 80, 0);
    sbx_error *err = NULL;

    wait_for_output(p, "go\r\n");
    cr_assert_eq(sbx_process_close_stdin(p, &err), 0);
    cr_assert_eq(wait_end(p), 9);
    sbx_process_free(p);
}

Test(tty, kill_ends_it)
{
    sbx_process *p = start("echo go; exec sleep 30", 24, 80, 0);
    sbx_error *err = NULL;

    wait_for_output(p, "go\r\n");
    cr_assert_eq(sbx_process_kill(p, SIGKILL, &err), 0, "kill: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(wait_end(p), 128 + SIGKILL);
    sbx_process_free(p);
}

Test(tty, typed_eof_character)
{
    sbx_process *p = start("cat; echo end", 24, 80, 0);

    write_str(p, "abc\r");
    wait_for_output(p, "abc\r\nabc\r\n");
    write_str(p, "\004");
    cr_assert_eq(wait_end(p), 0);
    cr_assert(strstr(g_sink.out, "end\r\n"), "stdout: \"%s\"", g_sink.out);
    sbx_process_free(p);
}
