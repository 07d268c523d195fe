/*
 * sbx presets: the presets visible by name.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx presets [--json]\n"
"\n"
"List the presets visible by name (registered at run time, SBX_PRESET_PATH,\n"
"${XDG_CONFIG_HOME:-$HOME/.config}/sbx/presets, then the built-in ones): name,\n"
"description and the file it comes from. `--preset NAME` on run and create\n"
"uses one.\n"
"\n"
"      --json   print a JSON array of the preset documents, each with an added\n"
"               \"source\"\n"
"  -h, --help   show this help and exit\n");
}

static int presets_main(int argc, char **argv)
{
    int json = 0;
    const cli_option table[] = {
        { "json", 0, 0, &json, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    sbx_preset **list = NULL;
    sbx_error *error = NULL;
    size_t count = 0;
    int status = cli_parse_options_only(&cli_command_presets, argc, argv, table, NULL);

    if (status != CLI_GO_ON)
        return status;
    if (sbx_presets_list(&list, &count, &error) < 0) {
        cli_error(error);
        return CLI_EXIT_TOOL;
    }
    if (json) {
        json_object *array = json_object_new_array();
        for (size_t i = 0; i < count; i++) {
            char *doc = sbx_preset_to_json(list[i]);
            json_object *o = doc ? json_tokener_parse(doc) : NULL;
            free(doc);
            if (o == NULL)
                continue;
            json_object_object_add(o, "source",
                                   json_object_new_string(sbx_preset_get0_source(list[i])));
            json_object_array_add(array, o);
        }
        cli_print_json(array);
    } else {
        size_t width = 4;
        for (size_t i = 0; i < count; i++)
            if (strlen(sbx_preset_get0_name(list[i])) > width)
                width = strlen(sbx_preset_get0_name(list[i]));
        printf("%-*s  %s\n", (int)width, "NAME", "DESCRIPTION");
        /* Names are checked; the description and the path are shown escaped. */
        for (size_t i = 0; i < count; i++) {
            printf("%-*s  ", (int)width, sbx_preset_get0_name(list[i]));
            cli_print_escaped(sbx_preset_get0_description(list[i]));
            printf("\n%-*s  source: ", (int)width, "");
            cli_print_escaped(sbx_preset_get0_source(list[i]));
            putchar('\n');
        }
    }
    sbx_preset_list_free(list, count);
    return 0;
}

const cli_command cli_command_presets = {
    "presets", "presets [--json]",
    "list the presets (creation defaults and setup commands)",
    presets_main, usage
};
