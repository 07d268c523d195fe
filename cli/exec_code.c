/*
 * sbx exec-code: run a snippet of code in a new sandbox.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx exec-code [OPTION]... CODE\n"
"\n"
"Create a sandbox, run CODE in it, stream its output, destroy the sandbox and\n"
"exit with the interpreter's exit status. CODE \"-\" reads the code from\n"
"standard input. The code's own standard input is empty.\n"
"\n"
"  -b, --backend=BACKEND    backend to use (default: $SBX_BACKEND, else local)\n"
"  -l, --language=LANGUAGE  python (default), bash, sh, node or javascript,\n"
"                           typescript (ts-node), ruby, go\n"
"      --timeout=SECONDS    sandbox lifetime and code timeout (default %g)\n"
"  -h, --help               show this help and exit\n"
"\n"
"Exit status: the interpreter's (128+N when killed by signal N, 124 when it\n"
"timed out); 125 when sbx itself failed.\n",
            SBX_DEFAULT_TIMEOUT_SECS);
}

/* Reads all of standard input into a NUL-terminated string (new); NULL
 * after reporting. */
static char *read_stdin(void)
{
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);

    if (buf == NULL)
        return NULL;
    for (;;) {
        ssize_t n;

        if (cap - len < 2) {
            char *bigger = realloc(buf, cap * 2);

            if (bigger == NULL) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
        n = read(STDIN_FILENO, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            cli_msg("cannot read the code from standard input: %s", strerror(errno));
            free(buf);
            return NULL;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    if (strlen(buf) != len) {
        cli_msg("the code read from standard input contains a NUL byte");
        free(buf);
        return NULL;
    }
    return buf;
}

typedef struct exec_code_ctx {
    cli_creation base;        /* -b, --timeout */
    const char *language;
} exec_code_ctx;

static int set_language(const cli_command *cmd, const char *arg, void *ctx)
{
    ((exec_code_ctx *)ctx)->language = arg;
    return CLI_GO_ON;
}

static int exec_code_main(int argc, char **argv)
{
    static const cli_option table[] = {
        { "backend", 'b', 1, NULL, cli_set_backend },
        { "language", 'l', 1, NULL, set_language },
        { "timeout", 0, 1, NULL, cli_set_timeout },
        { NULL, 't', 1, NULL, cli_old_timeout_letter },
        { NULL, 0, 0, NULL, NULL }
    };
    const char *backend = cli_default_backend();
    exec_code_ctx ctx = { { NULL, &backend }, NULL };
    cli_oneshot what = { 0 };
    char *code_buf = NULL;
    int status;

    ctx.base.options = cli_options_new();
    if (ctx.base.options == NULL)
        return CLI_EXIT_TOOL;
    status = cli_parse_options(&cli_command_exec_code, argc, argv, table, &ctx);
    if (status == CLI_GO_ON && optind >= argc)
        status = cli_usage_error(&cli_command_exec_code, "no code given");
    if (status == CLI_GO_ON && optind + 1 < argc)
        status = cli_usage_error(&cli_command_exec_code,
                                 "unexpected argument \"%s\" after the code "
                                 "(pass the code as one argument)", argv[optind + 1]);
    if (status == CLI_GO_ON && strcmp(argv[optind], "-") == 0) {
        what.code = code_buf = read_stdin();
        if (code_buf == NULL)
            status = CLI_EXIT_TOOL;
    } else if (status == CLI_GO_ON) {
        what.code = argv[optind];
    }
    /* An unknown language is refused before a sandbox is made for it. */
    sbx_error *lang_err = NULL;
    if (status == CLI_GO_ON && sbx_code_language_check(ctx.language, &lang_err) < 0)
        status = cli_usage_error(&cli_command_exec_code, "%s",
                                 lang_err ? sbx_error_get0_message(lang_err) : "out of memory");
    sbx_error_free(lang_err);
    if (status == CLI_GO_ON) {
        what.language = ctx.language;
        status = cli_oneshot_run(backend, ctx.base.options, &what);
    }
    free(code_buf);
    sbx_options_free(ctx.base.options);
    return status;
}

const cli_command cli_command_exec_code = {
    "exec-code", "exec-code [OPTION]... CODE",
    "run a snippet of code (python by default) in a new sandbox",
    exec_code_main, usage
};
