/*
 * sbx inspect: what is known of sandboxes made by `sbx create`, as JSON.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx inspect ID...\n"
"\n"
"Print a JSON array with one object per sandbox ID (an id, a name or a\n"
"unique id prefix), in the order given:\n"
"\n"
"  id             the sandbox id (in full)\n"
"  name           its --name, null when none\n"
"  backend        the backend it runs on\n"
"  provider_id    the id the backend knows it by\n"
"  state          running, expired, gone or unknown (as `sbx ps` shows)\n"
"  created        when it was created (ISO 8601, UTC)\n"
"  expires        when its lifetime ends (ISO 8601, UTC), null when unknown\n"
"  options        the creation options that were set, by name: values kept,\n"
"                 except env_vars, git_repo, backend_options, files and\n"
"                 workspace, shown as true (their values are not recorded)\n"
"  capabilities   the capability names a client of its backend has on this\n"
"                 host, null when the backend cannot be probed (the reason\n"
"                 is printed on stderr)\n"
"\n"
"  -h, --help   show this help and exit\n"
"\n"
"Exit status: 0 when every ID was found; 125 when one was not (\"no such\n"
"sandbox: ID\"; the others are still printed).\n");
}

/* The capability names a client of @backend has (new JSON array), NULL
 * when the backend cannot be probed (reported). */
static json_object *probed_caps(const char *backend)
{
    sbx_error *error = NULL;
    sbx_client *client = sbx_client_new(backend, &error);
    json_object *array;
    uint64_t caps = 0;
    unsigned bit;

    if (client == NULL || sbx_client_probe(client, &caps, &error) < 0) {
        cli_error(error);
        sbx_client_free(client);
        return NULL;
    }
    sbx_client_free(client);
    array = json_object_new_array();
    for (bit = 0; array != NULL && bit < 64; bit++) {
        const char *name;
        char other[16];

        if (!(caps & (UINT64_C(1) << bit)))
            continue;
        name = sbx_capability_name(UINT64_C(1) << bit);
        if (name == NULL) {
            snprintf(other, sizeof other, "bit%u", bit);
            name = other;
        }
        json_object_array_add(array, json_object_new_string(name));
    }
    return array;
}

/* The object of @rec (new). */
static json_object *inspect_one(const cli_record *rec)
{
    json_object *o = json_object_new_object(), *state, *v;
    char now[32];
    int alive;

    if (o == NULL)
        return NULL;
    cli_json_add_string(o, "id", rec->id);
    cli_json_add_string(o, "name", rec->name);
    cli_json_add_string(o, "backend", rec->backend);
    state = json_tokener_parse(rec->state);
    if (state != NULL && json_object_object_get_ex(state, "id", &v) &&
        json_object_is_type(v, json_type_string))
        cli_json_add_name(o, "provider_id", json_object_get_string(v));
    else
        json_object_object_add(o, "provider_id", NULL);
    json_object_put(state);
    alive = cli_record_alive(rec);
    cli_iso8601_now(now);
    cli_json_add_string(o, "state", cli_record_state(rec, alive, now));
    cli_json_add_string(o, "created", rec->created);
    cli_json_add_string(o, "expires", rec->expires);
    json_object_object_add(o, "options", rec->options != NULL
                                             ? json_tokener_parse(rec->options)
                                             : json_object_new_object());
    json_object_object_add(o, "capabilities", probed_caps(rec->backend));
    return o;
}

static int inspect_main(int argc, char **argv)
{
    int status = cli_parse_options(&cli_command_inspect, argc, argv, NULL, NULL);
    json_object *array;

    if (status != CLI_GO_ON)
        return status;
    if (optind >= argc)
        return cli_usage_error(&cli_command_inspect, "no sandbox id given");
    array = json_object_new_array();
    if (array == NULL)
        return cli_out_of_memory();
    for (status = 0; optind < argc && cli_signal == 0; optind++) {
        cli_record rec;
        json_object *o;

        if (cli_resolve_record(argv[optind], &rec) != 0) {
            status = CLI_EXIT_TOOL;
            continue;
        }
        o = inspect_one(&rec);
        cli_record_clear(&rec);
        if (o == NULL) {
            json_object_put(array);
            return cli_out_of_memory();
        }
        json_object_array_add(array, o);
    }
    cli_print_json(array);
    return cli_flush("the description") != 0 ? CLI_EXIT_TOOL : status;
}

const cli_command cli_command_inspect = {
    "inspect", "inspect ID...", "print what is known of sandboxes, as JSON",
    inspect_main, usage
};
