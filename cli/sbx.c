/*
 * sbx — run commands and code in sandboxes through libsbx.
 *
 *   sbx run [OPTION]... [--] COMMAND [ARG]...
 *   sbx exec-code [OPTION]... CODE
 *   sbx agent [OPTION]... PROMPT
 *   sbx backends [--json]
 *   sbx create [OPTION]...
 *   sbx exec [OPTION]... ID [--] COMMAND [ARG]...
 *   sbx cp [-r] SRC DST
 *   sbx ls [--json] ID [PATH]
 *   sbx inspect ID...
 *   sbx stop ID... / sbx start ID...
 *   sbx rm [-f] ID...
 *   sbx ps [-a] [-q] [--no-trunc] [--json]
 *   sbx gc [--dry-run] [--json]
 *   sbx presets [--json]
 *   sbx pricing [--json]
 *   sbx find-cheapest [-b BACKEND,...] [-n RUNS] [--json]
 *   sbx ledger [--json] FILE...
 *   sbx costs [--group-by=KEY] [--since=T] [--until=T] [--json]
 *   sbx version [--json]
 *
 * `sbx --remote URL COMMAND ...` runs COMMAND against a control plane
 * (cli_remote_backend in cli.h).
 *
 * The command's output goes to stdout/stderr untouched, as it arrives. The
 * tool's own messages go to stderr as "sbx: MESSAGE [code=...]"; the tool's
 * own failures exit 125 (as `docker run` does), otherwise the exit status is
 * the command's (128+N for signal N, 124 on timeout).
 *
 * run and exec-code: the sandbox is always destroyed before sbx exits (see
 * sandbox.c). create, exec, cp, ls, rm and ps work on sandboxes that
 * outlive sbx: an id maps to the sandbox's session state recorded in the
 * user's state directory (state.c), and each command resumes from it.
 *
 * This file only dispatches: each command is a file of its own (run.c,
 * exec.c, ...) over the shared layer in cli.h; the table below lists them
 * in the order `sbx --help` shows them.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const cli_command cli_command_help;

static const cli_command *const commands[] = {
    &cli_command_run,
    &cli_command_exec_code,
    &cli_command_agent,
    &cli_command_backends,
    &cli_command_create,
    &cli_command_exec,
    &cli_command_cp,
    &cli_command_ls,
    &cli_command_inspect,
    &cli_command_stop,
    &cli_command_start,
    &cli_command_port,
    &cli_command_persist,
    &cli_command_hydrate,
    &cli_command_rm,
    &cli_command_ps,
    &cli_command_gc,
    &cli_command_presets,
    &cli_command_pricing,
    &cli_command_find_cheapest,
    &cli_command_ledger,
    &cli_command_costs,
    &cli_command_version,
    &cli_command_help,
};

/* The command named @name, or NULL. */
static const cli_command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i]->name, name) == 0)
            return commands[i];
    return NULL;
}

/* Column where the summaries of the command list start. */
#define SUMMARY_COLUMN 21

static void usage_main(FILE *out)
{
    fprintf(out,
"Usage: sbx [--remote URL] COMMAND [OPTION]...\n"
"\n"
"Run commands and code in sandboxes through libsbx.\n"
"\n"
"Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        const char *s = commands[i]->summary, *nl;
        int len = (int)strlen(commands[i]->synopsis) + 2;

        /* A synopsis too long for the column puts its summary below it. */
        if (len < SUMMARY_COLUMN)
            fprintf(out, "  %s%*s", commands[i]->synopsis, SUMMARY_COLUMN - len, "");
        else
            fprintf(out, "  %s\n%*s", commands[i]->synopsis, SUMMARY_COLUMN, "");
        while ((nl = strchr(s, '\n')) != NULL) {
            fprintf(out, "%.*s\n%*s", (int)(nl - s), s, SUMMARY_COLUMN, "");
            s = nl + 1;
        }
        fprintf(out, "%s\n", s);
    }
    fprintf(out,
"\n"
"Options:\n"
"  -h, --help         show this help and exit\n"
"  -V, --version      print the version and exit\n"
"      --remote=URL   work through the control plane (sbx-server) at URL\n"
"\n"
"The backend is \"local\" unless the environment variable SBX_BACKEND names\n"
"another; -b BACKEND overrides both. A backend NAME is the plugin\n"
"libsbx-NAME.so, searched in the directories of SBX_PLUGIN_PATH, then in\n"
"%s (from a build tree, SBX_PLUGIN_PATH unset: in\n"
"that tree's plugins/*/.libs instead).\n"
"\n"
"With --remote URL, or BESPOKE_SANDBOX_URL set, run, create and exec-code make\n"
"their sandboxes on the \"remote\" backend: the control plane runs them on the\n"
"backend -b (or SBX_BACKEND) names, with its own credentials; the product key\n"
"is BESPOKE_SANDBOX_KEY. exec, cp, ls, rm and ps reach them there from the\n"
"records sbx create keeps on this host (an id made otherwise, through the\n"
"HTTP API or on another host, is not known to them); sbx costs prints what\n"
"the control plane metered.\n"
"\n"
"Exit status: the command's own (128+N when it was killed by signal N, 124\n"
"when it timed out); 125 when sbx itself failed (bad usage, missing backend,\n"
"sandbox creation failed, no such sandbox).\n"
"\n"
"Every command ends on SIGINT, SIGTERM and SIGHUP with status 128+N: the call\n"
"in progress is cancelled (a command run by exec ends, a copy stops and what\n"
"it made on this host is removed; run and exec-code destroy their sandbox).\n",
            sbx_plugin_dir());
}

static int help_main(int argc, char **argv)
{
    const cli_command *cmd;

    if (argc < 2) {
        usage_main(stdout);
        return 0;
    }
    cmd = find_command(argv[1]);
    if (cmd == NULL)
        return cli_usage_error(NULL, "unknown command \"%s\"", argv[1]);
    cmd->usage(stdout);
    return 0;
}

static const cli_command cli_command_help = {
    "help", "help [COMMAND]", "show this help, or the help of COMMAND",
    help_main, usage_main
};

int main(int argc, char **argv)
{
    const cli_command *cmd;
    int status;

    if (argc < 2) {
        usage_main(stderr);
        return CLI_EXIT_TOOL;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage_main(stdout);
        return 0;
    }
    if (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("sbx %s\n", sbx_version());
        return fflush(stdout) == 0 ? 0 : CLI_EXIT_TOOL;
    }

    /* --remote URL (or --remote=URL) before the command. */
    if (strcmp(argv[1], "--remote") == 0 || strncmp(argv[1], "--remote=", 9) == 0) {
        const char *url = argv[1][8] == '=' ? argv[1] + 9 : argc > 2 ? argv[2] : NULL;
        int used = argv[1][8] == '=' ? 1 : 2;

        if (url == NULL || *url == '\0')
            return cli_usage_error(NULL, "--remote needs the control plane's URL");
        if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
            return cli_usage_error(NULL, "invalid --remote value \"%s\": expected an http:// "
                                   "or https:// URL", url);
        if (setenv("BESPOKE_SANDBOX_URL", url, 1) != 0)
            return cli_out_of_memory();
        argv[used] = argv[0];
        argc -= used;
        argv += used;
        if (argc < 2) {
            usage_main(stderr);
            return CLI_EXIT_TOOL;
        }
    }

    cli_signals_install();
    cmd = find_command(argv[1]);
    if (cmd != NULL)
        status = cmd->main(argc - 1, argv + 1);
    else if (argv[1][0] == '-')
        status = cli_usage_error(NULL, "unknown option \"%s\"", argv[1]);
    else
        status = cli_usage_error(NULL, "unknown command \"%s\"", argv[1]);
    if (fflush(stdout) != 0 && status == 0)
        status = CLI_EXIT_TOOL;
    /* A stop signal ends every command with 128+N, also one that finished
     * its work meanwhile. */
    if (cli_signal != 0 && status < 128) {
        cli_msg("%s received", cli_signal_name(cli_signal));
        status = 128 + cli_signal;
    }
    return status;
}
