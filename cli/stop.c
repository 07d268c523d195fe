/*
 * sbx stop and sbx start: stop a sandbox made by `sbx create` without
 * destroying it, and start it again, where its backend can (docker,
 * daytona, e2b, runloop, tensorlake);
 * elsewhere the library's feature_not_supported names the backend. The
 * two commands are one mechanism, so they share this file.
 */
#include <stdlib.h>

#include "cli.h"

static void usage_stop(FILE *out)
{
    fprintf(out,
"Usage: sbx stop ID...\n"
"\n"
"Stop each sandbox ID (an id, a name or a unique id prefix) without\n"
"destroying it, where its backend can (docker: the container is paused,\n"
"every process in it frozen; daytona, e2b, runloop and tensorlake: the\n"
"provider stops or suspends it): nothing in it runs, its files stay,\n"
"`sbx exec` fails until `sbx start`, and `sbx ps -a` shows it \"stopped\".\n"
"Its lifetime is not extended. Prints ID as given.\n"
"\n"
"  -h, --help   show this help and exit\n"
"\n"
"Exit status: 0 when every sandbox was stopped; 125 otherwise (a backend\n"
"that cannot stop without destroying, local for one, is named:\n"
"code=feature_not_supported).\n");
}

static void usage_start(FILE *out)
{
    fprintf(out,
"Usage: sbx start ID...\n"
"\n"
"Start each sandbox ID that `sbx stop` stopped (an id, a name or a unique\n"
"id prefix): it runs commands again, with the files it had (docker: its\n"
"frozen processes go on). Prints ID as given.\n"
"\n"
"  -h, --help   show this help and exit\n"
"\n"
"Exit status: 0 when every sandbox was started; 125 otherwise.\n");
}

/* Stops (@stop) or starts sandbox @ref and records that. Returns 0 or
 * 125 (reported). */
static int stop_start_one(const char *ref, int stop)
{
    sbx_error *error = NULL;
    sbx_sandbox *sandbox;
    cli_record rec;
    int rc;

    if (cli_resolve_record(ref, &rec) != 0)
        return CLI_EXIT_TOOL;
    sandbox = sbx_resume(rec.state, &error);
    if (sandbox == NULL) {
        cli_error(error);
        cli_record_clear(&rec);
        return CLI_EXIT_TOOL;
    }
    rc = stop ? sbx_sandbox_stop(sandbox, &error) : sbx_sandbox_start(sandbox, &error);
    sbx_sandbox_free(sandbox);
    if (rc < 0) {
        cli_error(error);
        cli_record_clear(&rec);
        return CLI_EXIT_TOOL;
    }
    rc = rec.stopped == stop ? 0 : cli_state_set_stopped(&rec, stop);
    cli_record_clear(&rec);
    if (rc < 0)
        return CLI_EXIT_TOOL;
    printf("%s\n", ref);
    return 0;
}

static int stop_start_main(const cli_command *cmd, int argc, char **argv, int stop)
{
    int status = cli_parse_options(cmd, argc, argv, NULL, NULL);

    if (status != CLI_GO_ON)
        return status;
    if (optind >= argc)
        return cli_usage_error(cmd, "no sandbox id given");
    for (status = 0; optind < argc && cli_signal == 0; optind++) {
        int r = stop_start_one(argv[optind], stop);

        if (r > status)
            status = r;
    }
    return status;
}

static int stop_main(int argc, char **argv)
{
    return stop_start_main(&cli_command_stop, argc, argv, 1);
}

static int start_main(int argc, char **argv)
{
    return stop_start_main(&cli_command_start, argc, argv, 0);
}

const cli_command cli_command_stop = {
    "stop", "stop ID...", "stop sandboxes without destroying them (docker,\ndaytona, e2b, runloop, tensorlake)",
    stop_main, usage_stop
};

const cli_command cli_command_start = {
    "start", "start ID...", "start stopped sandboxes again",
    start_main, usage_start
};
