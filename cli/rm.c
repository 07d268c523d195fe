/*
 * sbx rm: destroy sandboxes made by `sbx create` and forget them.
 */
#include <stdlib.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx rm [-f] ID...\n"
"\n"
"Destroy each sandbox ID (an id, a name or a unique id prefix; everything\n"
"running in it ends, and what it left on the host is removed), forget it and\n"
"print ID as given.\n"
"\n"
"  -f, --force  also forget a sandbox that cannot be reached or destroyed\n"
"               (its backend gone, or failing): it is reported and forgotten,\n"
"               and one that no longer exists is forgotten with status 0\n"
"  -h, --help   show this help and exit\n"
"\n"
"Exit status: 0 when every sandbox was removed; 1 when a recorded sandbox no\n"
"longer existed (it is forgotten, as `docker rm` reports a missing container\n"
"with status 1; 0 with -f); 125 when an id is not recorded (\"no such\n"
"sandbox: ID\") or a sandbox could not be destroyed (it stays recorded,\n"
"unless -f).\n");
}

/* Forgets @id after its removal failed for a reason already reported
 * (-f). Returns 0, or 125 when the record cannot be removed. */
static int force_forget(const char *ref, const char *id)
{
    if (cli_state_forget(id) < 0)
        return CLI_EXIT_TOOL;
    cli_msg("forgot sandbox %s (-f); whatever is left of it is not removed", id);
    printf("%s\n", ref);
    return 0;
}

/* Destroys and forgets sandbox @ref. Returns 0, 1 when it was already gone
 * (forgotten), 125 when it could not be removed, 128+N when stop signal N
 * cancelled the destroy (it stays recorded). */
static int remove_one(const char *ref, int force)
{
    sbx_error *gone = NULL;
    cli_call call = { .kind = CLI_CALL_DESTROY, .what = "the removal" };
    cli_outcome outcome;
    char *id = NULL;
    int status;

    if (cli_resolve_id(ref, &id) != 0)
        return CLI_EXIT_TOOL;
    call.sandbox = cli_sandbox_open(id, &gone);
    if (call.sandbox == NULL) {
        if (gone == NULL) {
            status = force ? force_forget(ref, id) : CLI_EXIT_TOOL;
            free(id);
            return status;
        }
        /* Nothing left to destroy (docker rm exits 1 alike; -f: 0). */
        cli_error(gone);
        status = cli_state_forget(id) < 0 ? CLI_EXIT_TOOL : force ? 0 : 1;
        if (status != CLI_EXIT_TOOL)
            cli_msg("sandbox %s no longer exists; forgot it", id);
        free(id);
        return status;
    }
    status = cli_call_run(&call, &outcome);
    if (status == 0 && outcome.error != NULL)
        status = cli_outcome_fail(&outcome);
    else
        cli_outcome_clear(&outcome);
    sbx_sandbox_free(call.sandbox);
    if (status == CLI_EXIT_TOOL && force) {
        status = force_forget(ref, id);
        free(id);
        return status;
    }
    if (status != 0) {
        cli_msg("sandbox %s may still exist; it stays recorded", id);
        free(id);
        return status;
    }
    status = cli_state_forget(id) < 0 ? CLI_EXIT_TOOL : 0;
    if (status == 0)
        printf("%s\n", ref);
    free(id);
    return status;
}

static int rm_main(int argc, char **argv)
{
    int force = 0;
    const cli_option table[] = {
        { "force", 'f', 0, &force, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    int status = cli_parse_options(&cli_command_rm, argc, argv, table, NULL);

    if (status != CLI_GO_ON)
        return status;
    if (optind >= argc)
        return cli_usage_error(&cli_command_rm, "no sandbox id given");
    for (status = 0; optind < argc && cli_signal == 0; optind++) {
        int r = remove_one(argv[optind], force);

        if (r > status)
            status = r;
    }
    if (optind < argc) {
        /* A stop signal came: the sandboxes after it are left as they are. */
        cli_msg("%s received; %d sandbox%s not removed", cli_signal_name(cli_signal),
                argc - optind, argc - optind == 1 ? " was" : "es were");
        if (status < 128 + cli_signal)
            status = 128 + cli_signal;
    }
    return status;
}

const cli_command cli_command_rm = {
    "rm", "rm [-f] ID...", "destroy sandboxes and forget them",
    rm_main, usage
};
