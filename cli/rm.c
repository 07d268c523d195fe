/*
 * sbx rm: destroy sandboxes made by `sbx create` and forget them.
 */
#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx rm ID...\n"
"\n"
"Destroy each sandbox ID (everything running in it ends, and what it left on\n"
"the host is removed), forget it and print its id.\n"
"\n"
"  -h, --help   show this help and exit\n"
"\n"
"Exit status: 0 when every sandbox was removed; 1 when a recorded sandbox no\n"
"longer existed (it is forgotten, as `docker rm` reports a missing container\n"
"with status 1); 125 when an id is not recorded (\"no such sandbox: ID\") or\n"
"a sandbox could not be destroyed (it stays recorded).\n");
}

/* Destroys and forgets sandbox @id. Returns 0, 1 when it was already gone
 * (forgotten), 125 when it could not be removed, 128+N when stop signal N
 * cancelled the destroy (it stays recorded). */
static int remove_one(const char *id)
{
    sbx_error *gone = NULL;
    cli_call call = { .kind = CLI_CALL_DESTROY, .what = "the removal" };
    cli_outcome outcome;
    int status;

    call.sandbox = cli_sandbox_open(id, &gone);
    if (call.sandbox == NULL) {
        if (gone == NULL)
            return CLI_EXIT_TOOL;
        /* Nothing left to destroy (docker rm exits 1 alike). */
        cli_error(gone);
        if (cli_state_forget(id) < 0)
            return CLI_EXIT_TOOL;
        cli_msg("sandbox %s no longer exists; forgot it", id);
        return 1;
    }
    status = cli_call_run(&call, &outcome);
    if (status == 0 && outcome.error != NULL)
        status = cli_outcome_fail(&outcome);
    else
        cli_outcome_clear(&outcome);
    sbx_sandbox_free(call.sandbox);
    if (status != 0) {
        cli_msg("sandbox %s may still exist; it stays recorded", id);
        return status;
    }
    if (cli_state_forget(id) < 0)
        return CLI_EXIT_TOOL;
    printf("%s\n", id);
    return 0;
}

static int rm_main(int argc, char **argv)
{
    int status = cli_parse_options(&cli_command_rm, argc, argv, NULL, NULL);

    if (status != CLI_GO_ON)
        return status;
    if (optind >= argc)
        return cli_usage_error(&cli_command_rm, "no sandbox id given");
    for (status = 0; optind < argc && cli_signal == 0; optind++) {
        int r = remove_one(argv[optind]);

        if (r > status)
            status = r;
    }
    return status;
}

const cli_command cli_command_rm = {
    "rm", "rm ID...", "destroy sandboxes and forget them",
    rm_main, usage
};
