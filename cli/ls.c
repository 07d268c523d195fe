/*
 * sbx ls: list a directory of a sandbox made by `sbx create`.
 */
#include <inttypes.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx ls [--json] ID [PATH]\n"
"\n"
"List directory PATH (a sandbox path; default /, the sandbox's top) of the\n"
"sandbox ID, sorted by name: one line per entry with its type (dir or\n"
"file), its size in bytes and its name. Names are bytes the sandbox chose:\n"
"a backslash is shown as \\\\, newline, carriage return and tab as \\n, \\r,\n"
"\\t, and every other control character and every byte that is not valid\n"
"UTF-8 as \\xHH, so a name is always one line and never drives the terminal.\n"
"\n"
"      --json   print a JSON array of objects {name, path, is_dir, size,\n"
"               mode} (mode: the permission bits, as a number); the output\n"
"               is always valid UTF-8: a name or path that is not has each\n"
"               invalid byte shown as U+FFFD and its exact bytes in an added\n"
"               name_base64 / path_base64 (RFC 4648 base64)\n"
"  -h, --help   show this help and exit\n"
"\n"
"Exit status: 0 on success, 125 on failure.\n");
}

/* Prints @list (@count entries) as a JSON array. */
static void print_list_json(sbx_file_info **list, size_t count)
{
    json_object *array = json_object_new_array();
    size_t i;

    for (i = 0; i < count; i++) {
        json_object *o = json_object_new_object();

        cli_json_add_name(o, "name", sbx_file_info_get0_name(list[i]));
        cli_json_add_name(o, "path", sbx_file_info_get0_path(list[i]));
        json_object_object_add(o, "is_dir",
                               json_object_new_boolean(sbx_file_info_is_dir(list[i])));
        json_object_object_add(o, "size",
                               json_object_new_int64(sbx_file_info_get_size(list[i])));
        json_object_object_add(o, "mode",
                               json_object_new_int64(sbx_file_info_get_mode(list[i])));
        json_object_array_add(array, o);
    }
    cli_print_json(array);
}

/* Prints @list (@count entries) as a table. */
static void print_list_table(sbx_file_info **list, size_t count)
{
    size_t i;

    for (i = 0; i < count; i++) {
        int64_t size = sbx_file_info_get_size(list[i]);
        char num[32];

        if (size < 0)
            snprintf(num, sizeof num, "-");
        else
            snprintf(num, sizeof num, "%" PRId64, size);
        printf("%-4s %12s  ", sbx_file_info_is_dir(list[i]) ? "dir" : "file", num);
        cli_print_escaped(sbx_file_info_get0_name(list[i]));
        putchar('\n');
    }
}

static int ls_main(int argc, char **argv)
{
    const cli_command *cmd = &cli_command_ls;
    int json = 0;
    const cli_option table[] = {
        { "json", 0, 0, &json, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    cli_call call = { .kind = CLI_CALL_LIST, .what = "the listing" };
    cli_outcome outcome;
    int status = cli_parse_options(cmd, argc, argv, table, NULL);

    if (status != CLI_GO_ON)
        return status;
    if (optind >= argc)
        return cli_usage_error(cmd, "no sandbox id given");
    if (argc - optind > 2)
        return cli_usage_error(cmd, "unexpected argument \"%s\"", argv[optind + 2]);
    call.sandbox_path = argc - optind == 2 ? argv[optind + 1] : "/";
    call.sandbox = cli_sandbox_open(argv[optind], NULL);
    if (call.sandbox == NULL)
        return CLI_EXIT_TOOL;
    status = cli_call_run(&call, &outcome);
    if (status == 0 && outcome.list == NULL)
        status = cli_outcome_fail(&outcome);
    if (status == 0) {
        if (json)
            print_list_json(outcome.list, outcome.count);
        else
            print_list_table(outcome.list, outcome.count);
        cli_outcome_clear(&outcome);
        status = cli_flush("the listing");
    }
    sbx_sandbox_free(call.sandbox);
    return status;
}

const cli_command cli_command_ls = {
    "ls", "ls [--json] ID [PATH]", "list a directory of sandbox ID",
    ls_main, usage
};
