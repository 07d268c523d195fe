/*
 * sbx backends: the backend plugins found, what they declare and what a
 * client of each has on this host.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx backends [--json]\n"
"\n"
"List the backend plugins found (in the directories of SBX_PLUGIN_PATH, then\n"
"in %s; from a build tree, SBX_PLUGIN_PATH unset: in\n"
"that tree's plugins/*/.libs instead): name, version, status, the\n"
"capabilities it declares and, for a usable one, the capabilities a client\n"
"actually has on this host, and where plugins run: \"outofprocess\" (each\n"
"client's plugin in an sbx-plugin-host process of its own, the default) or\n"
"\"inprocess\" (SBX_PLUGIN_MODE=inprocess). Each plugin file is inspected in\n"
"a helper process, so one that crashes while loading is listed with the\n"
"signal instead of ending the listing.\n"
"\n"
"STATUS is what the checks found: \"ok\" when the plugin loaded and its probe\n"
"succeeded on this host; \"unavailable: REASON\" when it loaded but the probe\n"
"failed (docker without a reachable daemon, safehouse off macOS); otherwise\n"
"why the plugin file is not used.\n"
"\n"
"      --json   print a JSON array of objects {name, path, version,\n"
"               description, abi, usable, available, problem, caps,\n"
"               probed_caps, probe_error, mode} (usable: the file loaded;\n"
"               available: its probe succeeded too)\n"
"  -h, --help   show this help and exit\n"
"\n"
"Exit status: 0 when at least one plugin was found; 125 when none was.\n",
            sbx_plugin_dir());
}

/* The name of capability bit @bit: the library's, else "bitN" in @other. */
static const char *cap_name(unsigned bit, char other[16])
{
    const char *name = sbx_capability_name(UINT64_C(1) << bit);

    if (name != NULL)
        return name;
    snprintf(other, 16, "bit%u", bit);
    return other;
}

/* Capability names of @caps, space-separated, in a new string. */
static char *caps_to_string(uint64_t caps)
{
    size_t cap = 64 * 24 + 1, len = 0;
    char *out, other[16];
    unsigned bit;

    out = malloc(cap);
    if (out == NULL)
        return NULL;
    out[0] = '\0';
    for (bit = 0; bit < 64; bit++) {
        int n;

        if (!(caps & (UINT64_C(1) << bit)))
            continue;
        n = snprintf(out + len, cap - len, "%s%s", len ? " " : "", cap_name(bit, other));
        if (n > 0)
            len += (size_t)n;
    }
    return out;
}

/* Capability names of @caps as a JSON array (new). */
static json_object *caps_to_json(uint64_t caps)
{
    json_object *array = json_object_new_array();
    char other[16];
    unsigned bit;

    for (bit = 0; bit < 64; bit++)
        if (caps & (UINT64_C(1) << bit))
            json_object_array_add(array, json_object_new_string(cap_name(bit, other)));
    return array;
}

typedef struct backend_row {
    const sbx_backend_info *info;
    int usable;
    int probed;          /* probe succeeded */
    uint64_t probed_caps;
    char *probe_error;   /* the error when the client or the probe failed */
    char *probe_reason;  /* its message alone, for STATUS */
} backend_row;

static void probe_backend(backend_row *row)
{
    sbx_error *error = NULL;
    sbx_client *client;

    client = sbx_client_new(sbx_backend_info_get0_name(row->info), &error);
    if (client != NULL && sbx_client_probe(client, &row->probed_caps, &error) == 0)
        row->probed = 1;
    if (!row->probed) {
        row->probe_error = error != NULL ? sbx_error_to_string(error)
                                         : strdup("probe failed");
        row->probe_reason = strdup(error != NULL ? sbx_error_get0_message(error)
                                                 : "probe failed");
        sbx_error_free(error);
    }
    sbx_client_free(client);
}

/* "outofprocess" / "inprocess", or why SBX_PLUGIN_MODE is not usable. */
static const char *plugin_mode_text(void)
{
    static char text[512];
    sbx_error *error = NULL;
    int mode = sbx_plugin_mode_resolve(SBX_PLUGIN_MODE_DEFAULT, &error);

    if (mode < 0) {
        snprintf(text, sizeof text, "unusable: %s", sbx_error_get0_message(error));
        sbx_error_free(error);
        return text;
    }
    return sbx_plugin_mode_name((sbx_plugin_mode)mode);
}

static void print_backends_json(backend_row *rows, size_t count)
{
    json_object *array = json_object_new_array();
    size_t i;

    for (i = 0; i < count; i++) {
        const sbx_backend_info *info = rows[i].info;
        const char *problem = sbx_backend_info_get0_problem(info);
        unsigned major = sbx_backend_info_get_abi_major(info);
        unsigned minor = sbx_backend_info_get_abi_minor(info);
        json_object *o = json_object_new_object();
        char abi[32];

        cli_json_add_string(o, "name", sbx_backend_info_get0_name(info));
        cli_json_add_string(o, "path", sbx_backend_info_get0_path(info));
        cli_json_add_string(o, "version", sbx_backend_info_get0_version(info));
        cli_json_add_string(o, "description", sbx_backend_info_get0_description(info));
        if (major == 0 && minor == 0) {
            json_object_object_add(o, "abi", NULL);
        } else {
            snprintf(abi, sizeof abi, "%u.%u", major, minor);
            cli_json_add_string(o, "abi", abi);
        }
        json_object_object_add(o, "usable", json_object_new_boolean(rows[i].usable));
        json_object_object_add(o, "available",
                               json_object_new_boolean(rows[i].usable && rows[i].probed));
        cli_json_add_string(o, "problem", problem);
        json_object_object_add(o, "caps", caps_to_json(sbx_backend_info_get_caps(info)));
        json_object_object_add(o, "probed_caps",
                               rows[i].probed ? caps_to_json(rows[i].probed_caps) : NULL);
        cli_json_add_string(o, "mode", plugin_mode_text());
        cli_json_add_string(o, "probe_error", rows[i].probe_error);
        json_object_array_add(array, o);
    }
    cli_print_json(array);
}

static void print_backends_table(backend_row *rows, size_t count)
{
    int name_w = 4, version_w = 7;
    size_t i;

    if (count == 0)
        return;   /* said on stderr */
    for (i = 0; i < count; i++) {
        int n = (int)strlen(sbx_backend_info_get0_name(rows[i].info));
        int v = (int)strlen(sbx_backend_info_get0_version(rows[i].info));

        if (n > name_w)
            name_w = n;
        if (v > version_w)
            version_w = v;
    }
    printf("%-*s  %-*s  %s\n", name_w, "NAME", version_w, "VERSION", "STATUS");
    for (i = 0; i < count; i++) {
        const sbx_backend_info *info = rows[i].info;
        const char *version = sbx_backend_info_get0_version(info);
        const char *problem = sbx_backend_info_get0_problem(info);
        const char *description = sbx_backend_info_get0_description(info);
        char *declared;

        if (problem != NULL)
            printf("%-*s  %-*s  %s\n", name_w, sbx_backend_info_get0_name(info),
                   version_w, *version ? version : "-", problem);
        else if (!rows[i].probed)
            printf("%-*s  %-*s  unavailable: %s\n", name_w, sbx_backend_info_get0_name(info),
                   version_w, *version ? version : "-",
                   rows[i].probe_reason != NULL ? rows[i].probe_reason : "probe failed");
        else
            printf("%-*s  %-*s  ok\n", name_w, sbx_backend_info_get0_name(info),
                   version_w, *version ? version : "-");
        if (*description)
            printf("    description: %s\n", description);
        printf("    path:        %s\n", sbx_backend_info_get0_path(info));
        if (!rows[i].usable)
            continue;
        printf("    mode:        %s\n", plugin_mode_text());
        declared = caps_to_string(sbx_backend_info_get_caps(info));
        printf("    declared:    %s\n", declared != NULL ? declared : "");
        free(declared);
        if (rows[i].probed) {
            char *probed = caps_to_string(rows[i].probed_caps);

            printf("    probed:      %s\n", probed != NULL ? probed : "");
            free(probed);
        } else {
            printf("    probed:      failed: %s\n",
                   rows[i].probe_error != NULL ? rows[i].probe_error : "");
        }
    }
}

static int backends_main(int argc, char **argv)
{
    int json = 0;
    const cli_option table[] = {
        { "json", 0, 0, &json, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    sbx_backend_info **list = NULL;
    backend_row *rows;
    sbx_error *error = NULL;
    size_t count = 0, i;
    int status = cli_parse_options_only(&cli_command_backends, argc, argv, table, NULL);

    if (status != CLI_GO_ON)
        return status;
    if (sbx_backends_list(&list, &count, &error) < 0) {
        cli_error(error);
        return CLI_EXIT_TOOL;
    }
    rows = calloc(count ? count : 1, sizeof *rows);
    if (rows == NULL) {
        sbx_backend_info_list_free(list, count);
        return cli_out_of_memory();
    }
    for (i = 0; i < count; i++) {
        rows[i].info = list[i];
        rows[i].usable = sbx_backend_info_get0_problem(list[i]) == NULL;
        if (rows[i].usable)
            probe_backend(&rows[i]);
    }
    if (json)
        print_backends_json(rows, count);
    else
        print_backends_table(rows, count);
    for (i = 0; i < count; i++) {
        free(rows[i].probe_error);
        free(rows[i].probe_reason);
    }
    free(rows);
    sbx_backend_info_list_free(list, count);
    status = cli_flush("the list");
    if (status == 0 && count == 0) {
        cli_msg("no backend plugin found (searched SBX_PLUGIN_PATH and %s)", sbx_plugin_dir());
        status = CLI_EXIT_TOOL;
    }
    return status;
}

const cli_command cli_command_backends = {
    "backends", "backends [--json]",
    "list the backend plugins found and their capabilities",
    backends_main, usage
};
