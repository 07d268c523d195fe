/*
 * sbx gc: destroy, through libsbx's lifecycle record, what no longer should
 * exist.
 */
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx gc [--dry-run] [--json]\n"
"\n"
"Destroy, through libsbx's lifecycle record (sbx_gc()), every sandbox whose\n"
"lifetime has ended, every attached sandbox whose owning processes have all\n"
"ended without destroying it (a program killed by SIGKILL, say), and, on each\n"
"installed backend that can list what libsbx made, every sandbox with this\n"
"record's create token that no record knows. A sandbox without libsbx's\n"
"labels is never touched. Sandboxes made by `sbx create` are detached: gc\n"
"reaps them only once their lifetime has ended (and forgets them).\n"
"\n"
"Prints one line per sandbox: BACKEND ID REASON RESULT, where REASON is\n"
"expired, owner_gone or unrecorded and RESULT is reaped, would_reap (with\n"
"--dry-run) or failed: MESSAGE. A backend that cannot be listed is reported\n"
"on stderr: one line each, but those not set up on this host (no credential\n"
"or no configuration, as `sbx backends` shows) together on one line.\n"
"\n"
"      --dry-run  list what would be destroyed; touch nothing\n"
"      --json     print a JSON array of objects {backend, id, create_token,\n"
"                 reason, result, error} (error: null or the message)\n"
"  -h, --help     show this help and exit\n"
"\n"
"Exit status: 0 when everything found was reaped (or listed, with\n"
"--dry-run); 1 when something could not be reaped; 125 when the record\n"
"cannot be read.\n");
}

static const char *gc_reason_name(sbx_gc_reason reason)
{
    switch (reason) {
    case SBX_GC_EXPIRED: return "expired";
    case SBX_GC_OWNER_GONE: return "owner_gone";
    case SBX_GC_UNRECORDED: return "unrecorded";
    case SBX_GC_LIST_FAILED: return "list_failed";
    }
    return "unknown";
}

typedef struct gc_out {
    int dry_run;
    json_object *array;   /* --json */
    int failed;
    char unset[512];      /* backends not set up here, ", "-separated */
    int unset_more;       /* how many did not fit */
} gc_out;

/* Adds @backend to the backends not set up here (sbx has no credential or
 * configuration for them: nothing of theirs can be listed, which is no
 * news on a host that does not use them). */
static void gc_note_unset(gc_out *o, const char *backend)
{
    size_t len = strlen(o->unset);
    int n = snprintf(o->unset + len, sizeof o->unset - len, "%s%s", len ? ", " : "", backend);

    if (n < 0 || (size_t)n >= sizeof o->unset - len) {
        o->unset[len] = '\0';
        o->unset_more++;
    }
}

static int gc_print(const sbx_gc_item *item, void *user_data)
{
    gc_out *o = user_data;
    const char *result = item->reaped ? "reaped" : o->dry_run && !item->error ? "would_reap"
                                                                              : "failed";
    const char *err = item->error ? sbx_error_get0_message(item->error) : NULL;

    if (item->reason == SBX_GC_LIST_FAILED) {
        if (item->error && (sbx_error_get_code(item->error) == SBX_ERROR_CONFIGURATION
                            || sbx_error_get_code(item->error) == SBX_ERROR_AUTHENTICATION))
            gc_note_unset(o, item->backend);
        else
            cli_msg("gc: backend %s cannot be listed: %s", item->backend, err ? err : "");
        return 0;
    }
    if (!item->reaped && !(o->dry_run && !item->error))
        o->failed = 1;
    /* A reaped sandbox that sbx create recorded is forgotten too. */
    if (item->reaped && item->id[0] && cli_id_valid(item->id))
        cli_state_forget(item->id);
    if (o->array != NULL) {
        json_object *e = json_object_new_object();

        cli_json_add_string(e, "backend", item->backend);
        cli_json_add_string(e, "id", item->id);
        cli_json_add_string(e, "create_token", item->create_token);
        cli_json_add_string(e, "reason", gc_reason_name(item->reason));
        cli_json_add_string(e, "result", result);
        cli_json_add_string(e, "error", err);
        json_object_array_add(o->array, e);
    } else if (err != NULL) {
        printf("%s %s %s %s: %s\n", item->backend, item->id[0] ? item->id : "-",
               gc_reason_name(item->reason), result, err);
    } else {
        printf("%s %s %s %s\n", item->backend, item->id[0] ? item->id : "-",
               gc_reason_name(item->reason), result);
    }
    return 0;
}

static int gc_main(int argc, char **argv)
{
    gc_out out = { 0 };
    int json = 0;
    const cli_option table[] = {
        { "dry-run", 0, 0, &out.dry_run, NULL },
        { "json", 0, 0, &json, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    sbx_error *error = NULL;
    int status = cli_parse_options_only(&cli_command_gc, argc, argv, table, NULL);

    if (status != CLI_GO_ON)
        return status;
    if (json && (out.array = json_object_new_array()) == NULL)
        return cli_out_of_memory();
    if (sbx_gc(out.dry_run ? SBX_GC_DRY_RUN : 0, gc_print, &out, &error) < 0) {
        cli_error(error);
        json_object_put(out.array);
        return CLI_EXIT_TOOL;
    }
    if (out.unset[0] != '\0' && out.unset_more > 0)
        cli_msg("gc: not set up here, so not listed: %s and %d more (see sbx backends)",
                out.unset, out.unset_more);
    else if (out.unset[0] != '\0')
        cli_msg("gc: not set up here, so not listed: %s (see sbx backends)", out.unset);
    if (out.array != NULL) {
        printf("%s\n", json_object_to_json_string_ext(out.array, JSON_C_TO_STRING_PLAIN |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(out.array);
    }
    return out.failed ? 1 : 0;
}

const cli_command cli_command_gc = {
    "gc", "gc [--dry-run] [--json]",
    "destroy what no longer should exist: expired sandboxes,\n"
    "attached ones whose processes died, unrecorded ones",
    gc_main, usage
};
