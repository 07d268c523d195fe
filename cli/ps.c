/*
 * sbx ps: the sandboxes made by `sbx create` and what state they are in.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx ps [-a] [-q] [--no-trunc] [--json]\n"
"\n"
"List the sandboxes made by `sbx create` and not removed, oldest first: id,\n"
"name, backend, creation time (ISO 8601, UTC) and state: \"running\", or,\n"
"with -a only, \"stopped\" (by `sbx stop`), \"expired\" (its lifetime\n"
"ended: gone, or not answering and left to `sbx gc`), \"gone\" (no longer\n"
"exists) or \"unknown\" (that cannot be told; the reason is printed on\n"
"stderr). A docker container's 64-digit id is shown by its first 12 digits,\n"
"as `docker ps` does; other ids (local's sbx-local-XXXXXX) in full. Any\n"
"unique prefix of an id names the sandbox.\n"
"\n"
"  -a, --all      list every recorded sandbox, not only the running ones\n"
"  -q, --quiet    print only the ids, one a line, as the table shows them\n"
"                 (sbx rm $(sbx ps -q) removes every running sandbox)\n"
"      --no-trunc show ids in full\n"
"      --json     print a JSON array of objects {id, name, backend, created,\n"
"                 expires, state, alive} (ids in full; name and expires null\n"
"                 when not recorded; alive true, false or null)\n"
"  -h, --help     show this help and exit\n"
"\n"
"Exit status: 0; 125 when the state directory cannot be read, or when a\n"
"record is malformed or refused (reported on stderr; the others are listed).\n");
}

int cli_record_alive(const cli_record *rec)
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

const char *cli_record_state(const cli_record *rec, int alive, const char *now)
{
    if (alive < 0)   /* no answer (a frozen sandbox): its lifetime still tells */
        return rec->expires != NULL && strcmp(rec->expires, now) <= 0 ? "expired" : "unknown";
    if (rec->stopped && alive)
        return "stopped";   /* docker: paused, alive but running nothing */
    if (alive)
        return "running";
    if (rec->expires != NULL && strcmp(rec->expires, now) <= 0)
        return "expired";
    return rec->stopped ? "stopped" : "gone";
}

static void print_ps_json(const cli_record *recs, const int *alive, const char *const *states,
                          size_t n)
{
    json_object *array = json_object_new_array();
    size_t i;

    for (i = 0; i < n; i++) {
        json_object *o = json_object_new_object();

        cli_json_add_string(o, "id", recs[i].id);
        cli_json_add_string(o, "name", recs[i].name);
        cli_json_add_string(o, "backend", recs[i].backend);
        cli_json_add_string(o, "created", recs[i].created);
        cli_json_add_string(o, "expires", recs[i].expires);
        cli_json_add_string(o, "state", states[i]);
        json_object_object_add(o, "alive",
                               alive[i] < 0 ? NULL : json_object_new_boolean(alive[i]));
        json_object_array_add(array, o);
    }
    cli_print_json(array);
}

/* Replaces *@s by its escaped form (cli_escape_name) when memory allows. */
static void escape_in_place(char **s)
{
    char *e;

    if (*s == NULL || (e = cli_escape_name(*s)) == NULL)
        return;
    free(*s);
    *s = e;
}

static void print_ps_table(cli_record *recs, const char *const *states, size_t n,
                           int no_trunc)
{
    int id_w = 2, name_w = 4, backend_w = 7;
    char buf[CLI_SHORT_ID_LEN + 1];
    size_t i;

    /* What comes from the record is shown escaped (the id is checked). */
    for (i = 0; i < n; i++) {
        const char *id = no_trunc ? recs[i].id : cli_short_id(recs[i].id, buf);

        escape_in_place(&recs[i].backend);
        escape_in_place(&recs[i].created);
        escape_in_place(&recs[i].name);
        if ((int)strlen(id) > id_w)
            id_w = (int)strlen(id);
        if (recs[i].name != NULL && (int)strlen(recs[i].name) > name_w)
            name_w = (int)strlen(recs[i].name);
        if ((int)strlen(recs[i].backend) > backend_w)
            backend_w = (int)strlen(recs[i].backend);
    }
    printf("%-*s  %-*s  %-*s  %-20s  %s\n", id_w, "ID", name_w, "NAME", backend_w, "BACKEND",
           "CREATED", "STATE");
    for (i = 0; i < n; i++)
        printf("%-*s  %-*s  %-*s  %-20s  %s\n", id_w,
               no_trunc ? recs[i].id : cli_short_id(recs[i].id, buf), name_w,
               recs[i].name != NULL ? recs[i].name : "-", backend_w, recs[i].backend,
               recs[i].created, states[i]);
}

/* -q: the ids alone, as the table shows them. */
static void print_ps_ids(const cli_record *recs, size_t n, int no_trunc)
{
    char buf[CLI_SHORT_ID_LEN + 1];
    size_t i;

    for (i = 0; i < n; i++)
        printf("%s\n", no_trunc ? recs[i].id : cli_short_id(recs[i].id, buf));
}

static int ps_main(int argc, char **argv)
{
    int json = 0, all = 0, no_trunc = 0, quiet = 0;
    const cli_option table[] = {
        { "all", 'a', 0, &all, NULL },
        { "quiet", 'q', 0, &quiet, NULL },
        { "no-trunc", 0, 0, &no_trunc, NULL },
        { "json", 0, 0, &json, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    cli_record *recs;
    const char **states;
    char now[32];
    size_t n, i, shown = 0;
    int *alive, r, status = cli_parse_options_only(&cli_command_ps, argc, argv, table, NULL);

    if (status != CLI_GO_ON)
        return status;
    if (quiet && json)
        return cli_usage_error(&cli_command_ps, "-q and --json cannot be used together");
    r = cli_state_list(&recs, &n);
    if (r < 0)
        return CLI_EXIT_TOOL;
    alive = calloc(n ? n : 1, sizeof *alive);
    states = calloc(n ? n : 1, sizeof *states);
    if (alive == NULL || states == NULL) {
        free(alive);
        free(states);
        cli_state_list_free(recs, n);
        return cli_out_of_memory();
    }
    cli_iso8601_now(now);
    for (i = 0; i < n; i++) {
        int a = cli_record_alive(&recs[i]);

        /* Without -a only what runs (or cannot be told) is listed. */
        if (!all && (a == 0 || (a == 1 && recs[i].stopped))) {
            cli_record_clear(&recs[i]);
            continue;
        }
        alive[shown] = a;
        states[shown] = cli_record_state(&recs[i], a, now);
        if (shown != i) {
            recs[shown] = recs[i];
            memset(&recs[i], 0, sizeof recs[i]);
        }
        shown++;
    }
    if (json)
        print_ps_json(recs, alive, states, shown);
    else if (quiet)
        print_ps_ids(recs, shown, no_trunc);
    else
        print_ps_table(recs, states, shown, no_trunc);
    free(alive);
    free(states);
    cli_state_list_free(recs, n);
    status = cli_flush("the list");
    return status != 0 ? status : r > 0 ? CLI_EXIT_TOOL : 0;
}

const cli_command cli_command_ps = {
    "ps", "ps [-a] [-q] [--no-trunc] [--json]", "list the sandboxes made by create",
    ps_main, usage
};
