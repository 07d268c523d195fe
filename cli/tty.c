/*
 * Interactive commands (cli.h): -i pipes sbx's stdin to the command, -t runs
 * it on a terminal, as docker's letters do; and the errors that name the new
 * options where the letters' old meanings (-t SECONDS, -i IMAGE) are used.
 *
 * The command runs as an sbx_process driven from one poll loop on the main
 * thread: sbx's stdin (with -i), the process's descriptor, the stop-signal
 * pipe and a SIGWINCH pipe. With -i -t the caller's terminal is in raw mode
 * from the start of the command until it ends; it is restored on every way
 * out: the command's end, an error, a stop signal (whose handler only wakes
 * the loop) and exit() (an atexit handler).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cli.h"

#define TERM_CHUNK 65536
#define TERM_KILL_GRACE_SECS 2.0     /* SIGTERM, then SIGKILL, on a stop signal */
#define TERM_DEFAULT_ROWS 24
#define TERM_DEFAULT_COLS 80

/* ------------------------------------------------------ old letters */

/* 1 when @s is a number (what --timeout would take, sign and all). */
static int is_number(const char *s)
{
    char *end;

    if (s == NULL || *s == '\0')
        return 0;
    errno = 0;
    (void)strtod(s, &end);
    return *end == '\0' && errno == 0;
}

int cli_check_old_letters(const cli_command *cmd, int argc, char **argv, const char *what)
{
    if (what == NULL)
        return CLI_GO_ON;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (a[0] != '-' || strcmp(a, "--") == 0)
            break;          /* the first operand, or the end of the options */
        if (a[1] == '-')
            continue;
        if (strncmp(a, "-t", 2) == 0 && is_number(a + 2))
            return cli_usage_error(cmd, "-t now allocates a terminal: the %s is now "
                                   "--timeout %s", what, a + 2);
        if (strcmp(what, "lifetime") == 0 && strncmp(a, "-i", 2) == 0 && a[2] != '\0' &&
            strcmp(a + 2, "t") != 0)
            return cli_usage_error(cmd, "-i now keeps stdin open: the image is now --image %s",
                                   a + 2);
    }
    return CLI_GO_ON;
}

int cli_check_terminal_args(const cli_command *cmd, const cli_terminal *term, int argc,
                            char **argv, const char *what, int image_hint)
{
    if (term->tty && optind < argc && is_number(argv[optind]))
        return cli_usage_error(cmd, "-t now allocates a terminal: the %s is now --timeout %s",
                               what, argv[optind]);
    if (image_hint && term->interactive && optind + 1 < argc &&
        strcmp(argv[optind], "--") != 0 && strcmp(argv[optind + 1], "--") == 0)
        return cli_usage_error(cmd, "-i now keeps stdin open: the image is now --image %s",
                               argv[optind]);
    if (term->tty && !isatty(STDIN_FILENO)) {
        cli_msg("the input device is not a TTY (-t needs a terminal on stdin)");
        return CLI_EXIT_TOOL;
    }
    return CLI_GO_ON;
}

/* ------------------------------------------------------ the terminal */

static struct termios g_saved;
static int g_raw;                   /* g_saved holds the mode to restore */
static int g_winch_pipe[2] = { -1, -1 };

static void restore_terminal(void)
{
    if (g_raw) {
        tcsetattr(STDIN_FILENO, TCSADRAIN, &g_saved);
        g_raw = 0;
    }
}

static int raw_terminal(void)
{
    static int registered;
    struct termios raw;

    if (tcgetattr(STDIN_FILENO, &g_saved) < 0) {
        cli_msg("cannot read the terminal's mode: %s", strerror(errno));
        return -1;
    }
    if (!registered) {
        atexit(restore_terminal);
        registered = 1;
    }
    raw = g_saved;
    cfmakeraw(&raw);
    g_raw = 1;
    if (tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) < 0) {
        g_raw = 0;
        cli_msg("cannot put the terminal in raw mode: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static void on_winch(int signo)
{
    int saved = errno;
    char c = 1;
    ssize_t n = write(g_winch_pipe[1], &c, 1);

    (void)n;
    (void)signo;
    errno = saved;
}

/* Follows SIGWINCH through a pipe; -1 (no resizes followed) on failure. */
static int winch_install(void)
{
    struct sigaction sa;

    if (g_winch_pipe[0] >= 0)
        return g_winch_pipe[0];
    if (pipe(g_winch_pipe) < 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        fcntl(g_winch_pipe[i], F_SETFD, FD_CLOEXEC);
        fcntl(g_winch_pipe[i], F_SETFL, O_NONBLOCK);
    }
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, NULL);
    return g_winch_pipe[0];
}

/* The size of sbx's terminal (stdin's, else stdout's); 24x80 when unknown. */
static void terminal_size(unsigned *rows, unsigned *cols)
{
    struct winsize ws;

    if ((ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 || ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0)
        && ws.ws_row > 0 && ws.ws_col > 0) {
        *rows = ws.ws_row;
        *cols = ws.ws_col;
    } else {
        *rows = TERM_DEFAULT_ROWS;
        *cols = TERM_DEFAULT_COLS;
    }
}

/* ------------------------------------------------------ the loop */

/* On a stop signal: SIGTERM to the command's processes, SIGKILL after the
 * grace, and its end waited for (bounded). */
static void end_process(sbx_process *p)
{
    sbx_error *error = NULL;

    if (sbx_process_kill(p, SIGTERM, &error) < 0) {
        sbx_error_free(error);
        error = NULL;
    }
    if (sbx_process_wait(p, TERM_KILL_GRACE_SECS, NULL, NULL, &error) == 1)
        return;
    sbx_error_free(error);
    error = NULL;
    sbx_process_kill(p, SIGKILL, NULL);
    sbx_process_wait(p, TERM_KILL_GRACE_SECS, NULL, NULL, &error);
    sbx_error_free(error);
}

int cli_terminal_exec(sbx_sandbox *sandbox, sbx_exec_request *request, const cli_terminal *term)
{
    cli_sink sink = { { 0 } };
    sbx_error *error = NULL;
    sbx_result *result = NULL;
    sbx_process *p;
    char *buf = NULL;
    int stdin_open = term->interactive, winch = -1, status, rc = 0;

    if (cli_signal != 0)
        return 128 + cli_signal;
    request->on_output = cli_sink_output;
    request->user_data = &sink;
    request->flags = SBX_EXEC_NO_CAPTURE | (term->interactive ? SBX_EXEC_STDIN_OPEN : 0);
    if (term->tty) {
        terminal_size(&request->tty_rows, &request->tty_cols);
        winch = winch_install();
    }
    if ((buf = malloc(TERM_CHUNK)) == NULL)
        return cli_out_of_memory();
    p = sbx_sandbox_start_process(sandbox, request, &error);
    if (p == NULL) {
        free(buf);
        cli_error(error);
        return CLI_EXIT_TOOL;
    }
    if (term->tty && term->interactive && raw_terminal() < 0) {
        sbx_process_free(p);
        free(buf);
        return CLI_EXIT_TOOL;
    }
    for (;;) {
        struct pollfd pfd[4];
        int n = 0, iin = -1, isig = -1, iwinch = -1, pfd_proc;

        if (stdin_open) {
            iin = n;
            pfd[n++] = (struct pollfd){ .fd = STDIN_FILENO, .events = POLLIN };
        }
        pfd_proc = sbx_process_get_fd(p);
        if (pfd_proc >= 0)
            pfd[n++] = (struct pollfd){ .fd = pfd_proc, .events = POLLIN };
        if (cli_signal_fd() >= 0) {
            isig = n;
            pfd[n++] = (struct pollfd){ .fd = cli_signal_fd(), .events = POLLIN };
        }
        if (winch >= 0) {
            iwinch = n;
            pfd[n++] = (struct pollfd){ .fd = winch, .events = POLLIN };
        }
        if (poll(pfd, (nfds_t)n, pfd_proc >= 0 ? -1 : 100) < 0 && errno != EINTR) {
            restore_terminal();
            cli_msg("poll: %s", strerror(errno));
            rc = CLI_EXIT_TOOL;
            break;
        }
        if (isig >= 0 && pfd[isig].revents)
            cli_drain_fd(cli_signal_fd());
        if (cli_signal != 0) {
            restore_terminal();
            end_process(p);
            rc = 128 + cli_signal;
            break;
        }
        if (iwinch >= 0 && pfd[iwinch].revents) {
            unsigned rows, cols;

            cli_drain_fd(winch);
            terminal_size(&rows, &cols);
            if (sbx_process_resize(p, rows, cols, &error) < 0) {
                sbx_error_free(error);   /* a command that just ended: no matter */
                error = NULL;
            }
        }
        if (iin >= 0 && pfd[iin].revents) {
            ssize_t got = read(STDIN_FILENO, buf, TERM_CHUNK);

            if (got > 0) {
                if (sbx_process_write_stdin(p, buf, (size_t)got, &error) < 0) {
                    restore_terminal();
                    cli_error(error);
                    rc = CLI_EXIT_TOOL;
                    break;
                }
            } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
                /* EOF: the command's stdin closes (a terminal hangs up). */
                stdin_open = 0;
                if (sbx_process_close_stdin(p, &error) < 0) {
                    restore_terminal();
                    cli_error(error);
                    rc = CLI_EXIT_TOOL;
                    break;
                }
            }
        }
        status = sbx_process_wait(p, 0, NULL, &result, &error);
        if (status < 0) {
            restore_terminal();
            rc = cli_exec_status(NULL, error);
            break;
        }
        if (status == 1) {
            restore_terminal();
            rc = cli_exec_status(result, NULL);
            break;
        }
    }
    restore_terminal();
    sbx_process_free(p);
    free(buf);
    return rc;
}
