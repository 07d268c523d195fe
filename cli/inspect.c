/*
 * sbx inspect: what is known of sandboxes made by `sbx create`, as JSON
 * (the default) or as text (--format text).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx inspect [-f json|text] ID...\n"
"\n"
"Print a JSON array with one object per sandbox ID (an id, a name or a\n"
"unique id prefix), in the order given:\n"
"\n"
"  id             the sandbox id (in full)\n"
"  name           its --name, null when none\n"
"  backend        the backend it runs on\n"
"  provider_id    the id the backend knows it by\n"
"  state          running, stopped, expired, gone or unknown (as `sbx ps`\n"
"                 shows)\n"
"  created        when it was created (ISO 8601, UTC)\n"
"  expires        when its lifetime ends (ISO 8601, UTC), null when unknown\n"
"  options        the creation options that were set, by name: values kept,\n"
"                 except env_vars, git_repo, backend_options, files and\n"
"                 workspace, shown as true (their values are not recorded)\n"
"  capabilities   the capability names a client of its backend has on this\n"
"                 host, null when the backend cannot be probed (the reason\n"
"                 is printed on stderr)\n"
"  ports          its exposed ports, ascending, as objects {\"port\": PORT,\n"
"                 \"endpoint\": ENDPOINT} (ENDPOINT as `sbx port` prints it);\n"
"                 [] when none; null when the sandbox is not running or its\n"
"                 ports cannot be read (the reason is printed on stderr)\n"
"\n"
"With --format text, each sandbox is a block of \"FIELD: VALUE\" lines in\n"
"the order above (null printed as -, options as one line of JSON,\n"
"capabilities separated by commas), one \"port: PORT/tcp -> ENDPOINT\"\n"
"line per exposed port (\"ports: -\" when none or unknown), blocks\n"
"separated by an empty line.\n"
"\n"
"  -f, --format FORMAT   json (the default) or text\n"
"  -h, --help            show this help and exit\n"
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

/* The exposed ports of running sandbox @rec as a new JSON array of
 * {"port", "endpoint"}, ascending; NULL when they cannot be read
 * (reported). */
static json_object *exposed_ports(const cli_record *rec)
{
    sbx_error *error = NULL;
    sbx_sandbox *sandbox = sbx_resume(rec->state, &error);
    json_object *array = NULL;
    uint16_t *ports = NULL;
    size_t n = 0;

    if (sandbox == NULL || sbx_sandbox_list_ports(sandbox, &ports, &n, &error) < 0) {
        cli_error(error);
        sbx_sandbox_free(sandbox);
        return NULL;
    }
    array = json_object_new_array();
    for (size_t i = 0; array != NULL && i < n; i++) {
        char *endpoint = sbx_sandbox_resolve_port(sandbox, ports[i], &error);
        json_object *p;

        if (endpoint == NULL) {
            cli_error(error);
            json_object_put(array);
            array = NULL;
            break;
        }
        p = json_object_new_object();
        json_object_object_add(p, "port", json_object_new_int(ports[i]));
        json_object_object_add(p, "endpoint", json_object_new_string(endpoint));
        json_object_array_add(array, p);
        free(endpoint);
    }
    free(ports);
    sbx_sandbox_free(sandbox);
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
    json_object_object_add(o, "ports", alive == 1 && !rec->stopped ? exposed_ports(rec) : NULL);
    return o;
}

/* The string value of @key in @o, "-" when null or missing. */
static const char *text_of(json_object *o, const char *key)
{
    json_object *v;

    if (!json_object_object_get_ex(o, key, &v) || v == NULL)
        return "-";
    return json_object_get_string(v);
}

/* Prints @o (from inspect_one) as a text block. */
static void print_text(json_object *o)
{
    static const char *const fields[] = { "id", "name", "backend", "provider_id", "state",
                                          "created", "expires" };
    json_object *v;
    size_t i, n;

    for (i = 0; i < sizeof fields / sizeof fields[0]; i++)
        printf("%s: %s\n", fields[i], text_of(o, fields[i]));
    printf("options: %s\n", json_object_object_get_ex(o, "options", &v) && v != NULL
                                ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN)
                                : "-");
    printf("capabilities: ");
    if (json_object_object_get_ex(o, "capabilities", &v) && v != NULL &&
        json_object_array_length(v) > 0) {
        for (i = 0, n = json_object_array_length(v); i < n; i++)
            printf("%s%s", i ? "," : "", json_object_get_string(json_object_array_get_idx(v, i)));
        printf("\n");
    } else {
        printf("-\n");
    }
    if (json_object_object_get_ex(o, "ports", &v) && v != NULL &&
        json_object_array_length(v) > 0) {
        for (i = 0, n = json_object_array_length(v); i < n; i++) {
            json_object *p = json_object_array_get_idx(v, i);

            printf("port: %s/tcp -> %s\n", text_of(p, "port"), text_of(p, "endpoint"));
        }
    } else {
        printf("ports: -\n");
    }
}

static int set_format(const cli_command *cmd, const char *arg, void *ctx)
{
    int *text = ctx;

    if (strcmp(arg, "json") == 0)
        *text = 0;
    else if (strcmp(arg, "text") == 0)
        *text = 1;
    else
        return cli_usage_error(cmd, "invalid format \"%s\": expected json or text", arg);
    return CLI_GO_ON;
}

static int inspect_main(int argc, char **argv)
{
    static const cli_option options[] = {
        { "format", 'f', 1, NULL, set_format },
        { NULL, 0, 0, NULL, NULL }
    };
    int text = 0;
    int status = cli_parse_options(&cli_command_inspect, argc, argv, options, &text);
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
    if (text) {
        for (size_t i = 0, n = json_object_array_length(array); i < n; i++) {
            if (i > 0)
                printf("\n");
            print_text(json_object_array_get_idx(array, i));
        }
        json_object_put(array);
    } else {
        cli_print_json(array);
    }
    return cli_flush("the description") != 0 ? CLI_EXIT_TOOL : status;
}

const cli_command cli_command_inspect = {
    "inspect", "inspect [-f json|text] ID...", "print what is known of sandboxes, as JSON or text",
    inspect_main, usage
};
