/*
 * sbx exec: run a command in a sandbox made by `sbx create`.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx exec [OPTION]... ID [--] COMMAND [ARG]...\n"
"\n"
"Run COMMAND with its arguments (an argument vector, not a shell string) in\n"
"the sandbox ID made by `sbx create`, stream its output and exit with its\n"
"exit status. Files and background processes stay in the sandbox between\n"
"calls; the variables given at create still apply.\n"
"\n"
"  -e, --env=KEY=VALUE     set a variable for this command only (repeatable;\n"
"                          it wins over the sandbox's); -e KEY alone passes\n"
"                          sbx's own KEY, as docker does (nothing when unset)\n"
"  -w, --workdir=DIR       sandbox path of the working directory (default:\n"
"      --cwd=DIR           the sandbox's working directory)\n"
"      --timeout=SECONDS   kill the command's processes after SECONDS\n"
"                          (default: the sandbox's timeout)\n"
"  -i, --interactive       keep the command's stdin open and pass sbx's\n"
"                          standard input to it\n"
"  -t, --tty               run the command on a terminal (sbx's standard\n"
"                          input must be one): its size follows sbx's; with\n"
"                          -i every key, ^C and ^D included, goes to the\n"
"                          command\n"
"  -u, --user=USER         run the command as USER (a name or uid in the\n"
"                          sandbox; HOME is its home; refused where the\n"
"                          backend cannot run as another user)\n"
"  -h, --help              show this help and exit\n"
"\n"
"Without -i the command's standard input is empty. With -t its output and\n"
"errors both come on standard output, as a terminal shows them. On SIGINT,\n"
"SIGTERM or SIGHUP the command's processes are ended and sbx exits with\n"
"128+N; the sandbox stays. The timeout was -t before 0.x followed docker's\n"
"letters; that use is an error naming --timeout.\n"
"\n"
"Exit status: the command's (128+N when killed by signal N, 124 when it\n"
"timed out); 125 when sbx itself failed (\"no such sandbox: ID\" for an id\n"
"that is not recorded).\n");
}

typedef struct exec_ctx {
    sbx_exec_request request;
    const char **env;         /* -e, room for every argument */
    size_t nenv;
    cli_terminal term;        /* -i, -t */
} exec_ctx;

static int add_env(const cli_command *cmd, const char *arg, void *ctx)
{
    exec_ctx *c = ctx;
    int status = cli_env_arg(cmd, arg, &arg);

    if (status == CLI_GO_ON && arg != NULL)
        c->env[c->nenv++] = arg;
    return status;
}

static int set_cwd(const cli_command *cmd, const char *arg, void *ctx)
{
    ((exec_ctx *)ctx)->request.cwd = arg;
    return CLI_GO_ON;
}

static int set_timeout(const cli_command *cmd, const char *arg, void *ctx)
{
    return cli_parse_positive(cmd, "--timeout", arg, "seconds",
                              &((exec_ctx *)ctx)->request.timeout_secs);
}

static int set_user(const cli_command *cmd, const char *arg, void *ctx)
{
    ((exec_ctx *)ctx)->request.user = arg;
    return CLI_GO_ON;
}

static int set_tty(const cli_command *cmd, const char *arg, void *ctx)
{
    ((exec_ctx *)ctx)->term.tty = 1;
    return CLI_GO_ON;
}

static int set_interactive(const cli_command *cmd, const char *arg, void *ctx)
{
    ((exec_ctx *)ctx)->term.interactive = 1;
    return CLI_GO_ON;
}

/* Runs the command of @c in the sandbox @id; returns the exit status. */
static int exec_in(const char *id, exec_ctx *c)
{
    /* On a stop signal the command's processes end; the sandbox stays. */
    cli_call call = { .kind = CLI_CALL_EXEC, .what = "the command", .request = &c->request };
    cli_outcome outcome;
    cli_sink sink = { { 0 } };
    int status;

    call.sandbox = cli_sandbox_open(id, NULL);
    if (call.sandbox == NULL)
        return CLI_EXIT_TOOL;
    c->request.env = c->nenv > 0 ? c->env : NULL;
    if (c->term.interactive || c->term.tty) {
        status = cli_terminal_exec(call.sandbox, &c->request, &c->term);
        sbx_sandbox_free(call.sandbox);
        return status;
    }
    c->request.on_output = cli_sink_output;
    c->request.user_data = &sink;
    c->request.flags = SBX_EXEC_NO_CAPTURE;
    status = cli_call_run(&call, &outcome);
    if (status == 0) {
        status = cli_exec_status(outcome.result, outcome.error);
        outcome.result = NULL;
        outcome.error = NULL;
        cli_outcome_clear(&outcome);
    }
    sbx_sandbox_free(call.sandbox);
    return status;
}

static int exec_main(int argc, char **argv)
{
    static const cli_option table[] = {
        { "env", 'e', 1, NULL, add_env },
        { "cwd", 0, 1, NULL, set_cwd },
        { "workdir", 'w', 1, NULL, set_cwd },
        { "timeout", 0, 1, NULL, set_timeout },
        { "tty", 't', 0, NULL, set_tty },
        { "interactive", 'i', 0, NULL, set_interactive },
        { "user", 'u', 1, NULL, set_user },
        { NULL, 0, 0, NULL, NULL }
    };
    exec_ctx ctx = { SBX_EXEC_REQUEST_INIT, NULL, 0, { 0, 0 } };
    const char *id;
    int status;

    ctx.request.timeout_secs = 0;   /* the sandbox's timeout_secs unless -t */
    ctx.env = calloc((size_t)argc + 1, sizeof *ctx.env);
    if (ctx.env == NULL)
        return cli_out_of_memory();
    status = cli_check_old_letters(&cli_command_exec, argc, argv, "timeout");
    if (status == CLI_GO_ON)
        status = cli_parse_options(&cli_command_exec, argc, argv, table, &ctx);
    if (status == CLI_GO_ON)
        status = cli_check_terminal_args(&cli_command_exec, &ctx.term, argc, argv, "timeout", 0);
    if (status == CLI_GO_ON && optind >= argc)
        status = cli_usage_error(&cli_command_exec, "no sandbox id given");
    if (status == CLI_GO_ON) {
        id = argv[optind++];
        if (optind < argc && strcmp(argv[optind], "--") == 0)
            optind++;
        if (optind >= argc) {
            status = cli_usage_error(&cli_command_exec, "no command given");
        } else {
            ctx.request.argv = (const char *const *)(argv + optind);
            status = exec_in(id, &ctx);
        }
    }
    free(ctx.env);
    return status;
}

const cli_command cli_command_exec = {
    "exec", "exec [OPTION]... ID [--] COMMAND [ARG]...", "run COMMAND in sandbox ID",
    exec_main, usage
};
