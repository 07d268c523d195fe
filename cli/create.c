/*
 * sbx create: a sandbox that outlives sbx, recorded in the state store.
 */
#include <stdlib.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx create [OPTION]...\n"
"\n"
"Create a sandbox that outlives sbx, print its id (alone on one line) and\n"
"leave it running, for `sbx exec`, `sbx cp`, `sbx ls` and `sbx rm`. The id\n"
"maps to the sandbox's session state (no environment value, no credential),\n"
"recorded in %s\n"
"(refused unless it, its records and its parents are the user's, or root's\n"
"for parents, and not writable by group or others).\n"
"\n"
"  -b, --backend=BACKEND   backend to use (default: $SBX_BACKEND, else local)\n"
"  -e, --env=KEY=VALUE     set an environment variable for every command of\n"
"                          the sandbox (repeatable; VALUE is taken literally)\n"
"  -w, --workdir=DIR       directory commands start in, inside the sandbox,\n"
"                          made when missing (on local: the host directory\n"
"                          used as the sandbox root, never deleted)\n"
"  -t, --timeout=SECONDS   sandbox lifetime and default command timeout\n"
"                          (default %g)\n"
CLI_CREATION_OPTIONS_HELP
"\n"
"Exit status: 0 when the sandbox was created and recorded; 125 otherwise\n"
"(nothing is left running then).\n",
            "${SBX_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/sbx}/sandboxes",
            SBX_DEFAULT_TIMEOUT_SECS);
}

/* Creates the sandbox @options describe on @backend, records it and prints
 * its id; returns the exit status. */
static int create_recorded(const char *backend, const sbx_options *options)
{
    /* A stop signal cancels the creation; the library undoes what it made
     * (a sandbox half made or made meanwhile is destroyed). */
    cli_call call = { .kind = CLI_CALL_CREATE, .what = "the creation", .backend = backend,
                      .options = options, .grace = CLI_SIGNAL_DRAIN_SECS };
    cli_outcome outcome;
    sbx_sandbox *sandbox;
    sbx_error *error = NULL;
    char *state, created[32];
    int status;

    cli_iso8601_now(created);
    status = cli_call_run(&call, &outcome);
    if (status != 0)
        return status;
    if (outcome.sandbox == NULL)
        return cli_outcome_fail(&outcome);
    sandbox = outcome.sandbox;
    outcome.sandbox = NULL;
    cli_outcome_clear(&outcome);
    status = CLI_EXIT_TOOL;
    state = sbx_sandbox_session_state(sandbox, &error);
    if (state == NULL) {
        cli_error(error);
        cli_msg("the sandbox cannot outlive sbx on backend %s; destroying it", backend);
        cli_sandbox_destroy(sandbox);
    } else if (cli_state_store(sbx_sandbox_get0_id(sandbox), created, state) < 0) {
        cli_sandbox_destroy(sandbox);
    } else {
        printf("%s\n", sbx_sandbox_get0_id(sandbox));
        status = 0;
    }
    free(state);
    sbx_sandbox_free(sandbox);
    return status;
}

static int create_main(int argc, char **argv)
{
    const char *backend = cli_default_backend();
    sbx_options *options = cli_options_new();
    char *dir = NULL;
    int status;

    if (options == NULL)
        return CLI_EXIT_TOOL;
    status = cli_parse_creation_options(&cli_command_create, argc, argv, options, &backend);
    if (status == CLI_GO_ON)
        status = cli_no_operands(&cli_command_create, argc, argv);
    /* The record must be possible before a sandbox is made for it. */
    if (status == CLI_GO_ON && cli_state_dir_open(1, &dir) < 0)
        status = CLI_EXIT_TOOL;
    if (status == CLI_GO_ON) {
        /* It outlives sbx: detached, bounded by its lifetime. */
        sbx_options_set_detached(options, 1, NULL);
        status = create_recorded(backend, options);
    }
    free(dir);
    sbx_options_free(options);
    return status;
}

const cli_command cli_command_create = {
    "create", "create [OPTION]...", "create a sandbox that outlives sbx and print its id",
    create_main, usage
};
