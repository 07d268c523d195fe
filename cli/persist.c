/*
 * sbx persist and sbx hydrate: a sandbox's workspace out to a tar stream
 * and back in, on any backend (the library's persist/hydrate layout). The
 * two commands are one mechanism, so they share this file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage_persist(FILE *out)
{
    fprintf(out,
"Usage: sbx persist [OPTION]... ID FILE|-\n"
"\n"
"Write the workspace of sandbox ID (an id, a name or a unique id prefix)\n"
"to FILE (made or replaced, mode 0600), or to standard output for -, as\n"
"one tar stream: the directory's contents under workspace/, the same\n"
"layout on every backend, for `sbx hydrate` on this or another sandbox.\n"
"\n"
"  -C, --dir=DIR     the sandbox directory to persist (default: the\n"
"                    sandbox's working directory)\n"
"      --agent-home  also the agent state of the sandbox user's home:\n"
"                    ~/.claude/, ~/.claude.json, $CODEX_HOME (else ~/.codex),\n"
"                    under home/\n"
"  -h, --help        show this help and exit\n"
"\n"
"Exit status: 0 when the stream was written whole; 125 otherwise (FILE is\n"
"removed again).\n");
}

static void usage_hydrate(FILE *out)
{
    fprintf(out,
"Usage: sbx hydrate [OPTION]... ID FILE|-\n"
"\n"
"Restore a stream made by `sbx persist` (on any backend), read from FILE or\n"
"from standard input for -, into sandbox ID (an id, a name or a unique id\n"
"prefix): the directory then holds exactly the stream's workspace. The\n"
"whole stream is checked before the sandbox is touched: a stream that is\n"
"not one (not a tar, an entry that escapes the directory, an entry outside\n"
"the layout) leaves the directory as it was.\n"
"\n"
"  -C, --dir=DIR     the sandbox directory to restore into (default: the\n"
"                    sandbox's working directory; made when missing)\n"
"      --agent-home  also restore the agent state the stream holds into\n"
"                    the sandbox user's home (else it is left out)\n"
"  -h, --help        show this help and exit\n"
"\n"
"Exit status: 0 when the workspace was restored; 125 otherwise\n"
"(code=workspace names a refused entry).\n");
}

typedef struct persist_ctx {
    const char *dir;
    int agent_home;
} persist_ctx;

static int set_dir(const cli_command *cmd, const char *arg, void *ctx)
{
    if (arg[0] != '/')
        return cli_usage_error(cmd, "-C %s: expected an absolute sandbox path", arg);
    ((persist_ctx *)ctx)->dir = arg;
    return CLI_GO_ON;
}

static int persist_hydrate(const cli_command *cmd, int argc, char **argv, int persist)
{
    persist_ctx ctx = { NULL, 0 };
    const cli_option table[] = {
        { "dir", 'C', 1, NULL, set_dir },
        { "agent-home", 0, 0, &ctx.agent_home, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    sbx_error *error = NULL;
    sbx_sandbox *sandbox;
    const char *file;
    int status = cli_parse_options(cmd, argc, argv, table, &ctx);
    int fd, made = 0;
    int64_t n;

    if (status != CLI_GO_ON)
        return status;
    if (argc - optind < 2)
        return cli_usage_error(cmd, optind >= argc ? "no sandbox id given"
                                                   : "no FILE given (- for standard %s)",
                               persist ? "output" : "input");
    if (argc - optind > 2)
        return cli_usage_error(cmd, "unexpected argument \"%s\"", argv[optind + 2]);
    file = argv[optind + 1];
    sandbox = cli_sandbox_open(argv[optind], NULL);
    if (sandbox == NULL)
        return CLI_EXIT_TOOL;
    if (strcmp(file, "-") == 0) {
        fd = persist ? STDOUT_FILENO : STDIN_FILENO;
    } else {
        fd = persist ? open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)
                     : open(file, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            cli_msg("cannot open %s: %s", file, strerror(errno));
            sbx_sandbox_free(sandbox);
            return CLI_EXIT_TOOL;
        }
        made = persist;
    }
    n = persist ? sbx_sandbox_persist_workspace(sandbox, ctx.dir,
                                                ctx.agent_home ? SBX_PERSIST_AGENT_HOME : 0,
                                                fd, &error)
                : sbx_sandbox_hydrate_workspace(sandbox, ctx.dir,
                                                ctx.agent_home ? SBX_PERSIST_AGENT_HOME : 0,
                                                fd, &error);
    status = 0;
    if (n < 0) {
        cli_error(error);
        status = CLI_EXIT_TOOL;
    }
    if (fd != STDOUT_FILENO && fd != STDIN_FILENO && close(fd) < 0 && status == 0) {
        cli_msg("cannot write %s: %s", file, strerror(errno));
        status = CLI_EXIT_TOOL;
    }
    if (status != 0 && made)
        unlink(file);
    sbx_sandbox_free(sandbox);
    return status;
}

static int persist_main(int argc, char **argv)
{
    return persist_hydrate(&cli_command_persist, argc, argv, 1);
}

static int hydrate_main(int argc, char **argv)
{
    return persist_hydrate(&cli_command_hydrate, argc, argv, 0);
}

const cli_command cli_command_persist = {
    "persist", "persist [-C DIR] [--agent-home] ID FILE|-",
    "write the workspace of sandbox ID as a tar stream",
    persist_main, usage_persist
};

const cli_command cli_command_hydrate = {
    "hydrate", "hydrate [-C DIR] [--agent-home] ID FILE|-",
    "restore a persisted workspace into sandbox ID",
    hydrate_main, usage_hydrate
};
