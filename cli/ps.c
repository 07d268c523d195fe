/*
 * sbx ps: the sandboxes made by `sbx create` and whether they still exist.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx ps [--json]\n"
"\n"
"List the sandboxes made by `sbx create` and not removed, oldest first: id,\n"
"backend, creation time (ISO 8601, UTC) and whether the sandbox still\n"
"exists (yes, no, or unknown when that cannot be told).\n"
"\n"
"      --json   print a JSON array of objects {id, backend, created, alive}\n"
"               (alive: true, false or null)\n"
"  -h, --help   show this help and exit\n");
}

/* Whether the recorded sandbox still exists: 1, 0, or -1 (reported). */
static int record_alive(const cli_record *rec)
{
    sbx_error *error = NULL;
    sbx_sandbox *sandbox = sbx_resume(rec->state, &error);
    int alive;

    if (sandbox == NULL) {
        if (error != NULL && sbx_error_get_code(error) == SBX_ERROR_NOT_FOUND) {
            sbx_error_free(error);
            return 0;
        }
        cli_error(error);
        return -1;
    }
    alive = sbx_sandbox_is_alive(sandbox, &error);
    if (alive < 0)
        cli_error(error);
    sbx_sandbox_free(sandbox);
    return alive;
}

static void print_ps_json(const cli_record *recs, const int *alive, size_t n)
{
    json_object *array = json_object_new_array();
    size_t i;

    for (i = 0; i < n; i++) {
        json_object *o = json_object_new_object();

        cli_json_add_string(o, "id", recs[i].id);
        cli_json_add_string(o, "backend", recs[i].backend);
        cli_json_add_string(o, "created", recs[i].created);
        json_object_object_add(o, "alive",
                               alive[i] < 0 ? NULL : json_object_new_boolean(alive[i]));
        json_object_array_add(array, o);
    }
    cli_print_json(array);
}

static void print_ps_table(cli_record *recs, const int *alive, size_t n)
{
    int id_w = 2, backend_w = 7;
    size_t i;

    /* The backend and the time come from the record: shown escaped. */
    for (i = 0; i < n; i++) {
        char *b = cli_escape_name(recs[i].backend), *c = cli_escape_name(recs[i].created);

        if (b != NULL && c != NULL) {
            free(recs[i].backend);
            free(recs[i].created);
            recs[i].backend = b;
            recs[i].created = c;
        } else {
            free(b);
            free(c);
        }
        if ((int)strlen(recs[i].id) > id_w)
            id_w = (int)strlen(recs[i].id);
        if ((int)strlen(recs[i].backend) > backend_w)
            backend_w = (int)strlen(recs[i].backend);
    }
    printf("%-*s  %-*s  %-20s  %s\n", id_w, "ID", backend_w, "BACKEND", "CREATED", "ALIVE");
    for (i = 0; i < n; i++)
        printf("%-*s  %-*s  %-20s  %s\n", id_w, recs[i].id, backend_w, recs[i].backend,
               recs[i].created, alive[i] < 0 ? "unknown" : alive[i] ? "yes" : "no");
}

static int ps_main(int argc, char **argv)
{
    int json = 0;
    const cli_option table[] = {
        { "json", 0, 0, &json, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    cli_record *recs;
    size_t n, i;
    int *alive, r, status = cli_parse_options_only(&cli_command_ps, argc, argv, table, NULL);

    if (status != CLI_GO_ON)
        return status;
    r = cli_state_list(&recs, &n);
    if (r < 0)
        return CLI_EXIT_TOOL;
    alive = calloc(n ? n : 1, sizeof *alive);
    if (alive == NULL) {
        cli_state_list_free(recs, n);
        return cli_out_of_memory();
    }
    for (i = 0; i < n; i++)
        alive[i] = record_alive(&recs[i]);
    if (json)
        print_ps_json(recs, alive, n);
    else
        print_ps_table(recs, alive, n);
    free(alive);
    cli_state_list_free(recs, n);
    status = cli_flush("the list");
    return status != 0 ? status : r > 0 ? CLI_EXIT_TOOL : 0;
}

const cli_command cli_command_ps = {
    "ps", "ps [--json]", "list the sandboxes made by create",
    ps_main, usage
};
