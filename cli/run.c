/*
 * sbx run: create a sandbox, run a command in it, destroy it.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx run [OPTION]... [--] COMMAND [ARG]...\n"
"\n"
"Create a sandbox, run COMMAND with its arguments in it (as an argument\n"
"vector, not through a shell), stream its output, destroy the sandbox and exit\n"
"with the command's exit status.\n"
"\n"
"  -b, --backend=BACKEND   backend to use (default: $SBX_BACKEND, else local)\n"
"  -e, --env=KEY=VALUE     set an environment variable in the sandbox\n"
"                          (repeatable; VALUE is taken literally); -e KEY\n"
"                          alone passes sbx's own KEY, as docker does (and\n"
"                          nothing when sbx has no KEY)\n"
"  -w, --workdir=DIR       directory the command starts in, inside the\n"
"                          sandbox, made when missing (on local: the host\n"
"                          directory used as the sandbox root, never deleted)\n"
"      --timeout=SECONDS   sandbox lifetime and command timeout (default %g)\n"
"      --no-lifetime       no lifetime: the sandbox ends with sbx, even\n"
"                          killed (local, bubblewrap, safehouse); the\n"
"                          command has no timeout unless --timeout gives one\n"
"  -i, --interactive       keep the command's stdin open and pass sbx's\n"
"                          standard input to it\n"
"  -t, --tty               run the command on a terminal (sbx's standard\n"
"                          input must be one): its size follows sbx's; with\n"
"                          -i every key, ^C and ^D included, goes to the\n"
"                          command\n"
"  -u, --user=USER         run the command as USER (a name or uid in the\n"
"                          sandbox; refused where the backend cannot)\n"
"      --rm                accepted as docker's: the sandbox of run is always\n"
"                          destroyed when the command ends\n"
CLI_CREATION_OPTIONS_HELP
"\n"
"Without -i the command's standard input is empty (it reads end of file at\n"
"once): sbx does not pass its own standard input on. With -t the command's\n"
"output and errors both come on sbx's standard output, as a terminal shows\n"
"them. Options after COMMAND belong to the command. The sandbox is destroyed\n"
"when the command ends, when sbx fails and when sbx receives SIGINT, SIGTERM\n"
"or SIGHUP.\n"
"\n"
"The letters changed in 0.x to follow docker: the lifetime is --timeout\n"
"(formerly -t), the image --image (formerly -i); the old uses are errors\n"
"naming the new option.\n"
"\n"
"Exit status: the command's (128+N when killed by signal N, 124 when it\n"
"timed out and its processes were killed); 125 when sbx itself failed.\n",
            SBX_DEFAULT_TIMEOUT_SECS);
}

/* 1 when @name (no '/') names an executable file in a directory of this
 * host's PATH (an empty entry is the current directory, as for execvp). */
static int on_host_path(const char *name)
{
    const char *path = getenv("PATH");
    char file[4096];

    if (path == NULL)
        path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path;; p++) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);

        if (snprintf(file, sizeof file, "%.*s%s%s", (int)len, p, len ? "/" : "", name)
                < (int)sizeof file
            && access(file, X_OK) == 0)
            return 1;
        if (end == NULL)
            return 0;
        p = end;
    }
}

/*
 * After an exit status of 127 (command not found, as a shell reports it):
 * a docker user's `sbx run debian echo hi` ran a program named "debian".
 * When COMMAND has arguments, no '/', no --image was given and this host
 * has no such program either, say how an image is asked for. A hint only:
 * the status stays the command's.
 */
static void hint_image(const sbx_options *options, char *const *argv, int argc)
{
    const char *name = argv[0];

    if (argc < 2 || strchr(name, '/') != NULL || sbx_options_get0_image(options) != NULL
        || on_host_path(name))
        return;
    cli_msg("hint: sbx run takes the command first, so \"%s\" was run as a program and "
            "not found; to start from an image, give --image=%s (on a backend that takes "
            "one, as -b docker does)", name, name);
}

static int run_main(int argc, char **argv)
{
    const char *backend = cli_default_backend();
    sbx_options *options = cli_options_new();
    cli_oneshot what = { 0 };
    int status;

    if (options == NULL)
        return CLI_EXIT_TOOL;
    status = cli_parse_creation_options(&cli_command_run, argc, argv, options, &backend,
                                        &what.term);
    if (status == CLI_GO_ON)
        status = cli_check_terminal_args(&cli_command_run, &what.term, argc, argv, "lifetime", 1);
    if (status == CLI_GO_ON && optind >= argc)
        status = cli_usage_error(&cli_command_run, "no command given");
    if (status == CLI_GO_ON) {
        what.argv = (const char *const *)(argv + optind);
        what.user = cli_run_user;
        status = cli_oneshot_run(backend, options, &what);
        if (status == 127)
            hint_image(options, argv + optind, argc - optind);
    }
    sbx_options_free(options);
    return status;
}

const cli_command cli_command_run = {
    "run", "run [OPTION]... [--] COMMAND [ARG]...",
    "create a sandbox, run COMMAND in it, destroy it",
    run_main, usage
};
