/*
 * sbx version: the versions of sbx, the library, the plugin ABI and each
 * installed plugin.
 */
#include <string.h>

#include <sbx/plugin.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx version [--json]\n"
"\n"
"Print the version of sbx, of the libsbx library it runs with, the plugin\n"
"ABI (MAJOR.MINOR) this build speaks, and each backend plugin found\n"
"(SBX_PLUGIN_PATH, then %s) with its own\n"
"version and the ABI it was built for (\"-\" for a plugin that could not\n"
"be read; `sbx backends` says why).\n"
"\n"
"      --json   print one JSON object {sbx, libsbx, plugin_abi, plugins:\n"
"               [{name, version, abi, path}]} (version and abi null when\n"
"               unreadable)\n"
"  -h, --help   show this help and exit\n",
            sbx_plugin_dir());
}

static int version_main(int argc, char **argv)
{
    int json = 0;
    const cli_option table[] = {
        { "json", 0, 0, &json, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    sbx_backend_info **list = NULL;
    sbx_error *error = NULL;
    size_t count = 0, i;
    char abi[32];
    int status = cli_parse_options_only(&cli_command_version, argc, argv, table, NULL);

    if (status != CLI_GO_ON)
        return status;
    if (sbx_backends_list(&list, &count, &error) < 0) {
        cli_error(error);
        return CLI_EXIT_TOOL;
    }
    snprintf(abi, sizeof abi, "%u.%u", SBX_PLUGIN_ABI_MAJOR, SBX_PLUGIN_ABI_MINOR);
    if (json) {
        json_object *doc = json_object_new_object(), *plugins = json_object_new_array();

        cli_json_add_string(doc, "sbx", PACKAGE_VERSION);
        cli_json_add_string(doc, "libsbx", sbx_version());
        cli_json_add_string(doc, "plugin_abi", abi);
        for (i = 0; i < count; i++) {
            json_object *o = json_object_new_object();
            const char *version = sbx_backend_info_get0_version(list[i]);
            unsigned major = sbx_backend_info_get_abi_major(list[i]);
            unsigned minor = sbx_backend_info_get_abi_minor(list[i]);
            char pabi[32];

            snprintf(pabi, sizeof pabi, "%u.%u", major, minor);
            cli_json_add_string(o, "name", sbx_backend_info_get0_name(list[i]));
            cli_json_add_string(o, "version", *version ? version : NULL);
            cli_json_add_string(o, "abi", major == 0 && minor == 0 ? NULL : pabi);
            cli_json_add_string(o, "path", sbx_backend_info_get0_path(list[i]));
            json_object_array_add(plugins, o);
        }
        json_object_object_add(doc, "plugins", plugins);
        cli_print_json(doc);
    } else {
        int name_w = 4, version_w = 7;

        printf("sbx:         %s\n", PACKAGE_VERSION);
        printf("libsbx:      %s\n", sbx_version());
        printf("plugin ABI:  %s\n", abi);
        printf("plugins:%s\n", count == 0 ? "     none found" : "");
        for (i = 0; i < count; i++) {
            int n = (int)strlen(sbx_backend_info_get0_name(list[i]));
            int v = (int)strlen(sbx_backend_info_get0_version(list[i]));

            name_w = n > name_w ? n : name_w;
            version_w = v > version_w ? v : version_w;
        }
        for (i = 0; i < count; i++) {
            const char *version = sbx_backend_info_get0_version(list[i]);
            unsigned major = sbx_backend_info_get_abi_major(list[i]);
            unsigned minor = sbx_backend_info_get_abi_minor(list[i]);
            char pabi[32] = "-";

            if (major != 0 || minor != 0)
                snprintf(pabi, sizeof pabi, "%u.%u", major, minor);
            printf("  %-*s  %-*s  ABI %-5s  %s\n", name_w, sbx_backend_info_get0_name(list[i]),
                   version_w, *version ? version : "-", pabi,
                   sbx_backend_info_get0_path(list[i]));
        }
    }
    sbx_backend_info_list_free(list, count);
    return cli_flush("the versions");
}

const cli_command cli_command_version = {
    "version", "version [--json]",
    "print the versions of sbx, libsbx, the plugin ABI\nand plugins",
    version_main, usage
};
