/*
 * sbx pricing: the price table (sbx.h, "Money and pricing").
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx pricing [--json]\n"
"\n"
"Print the price table: for each backend its rate per vCPU-second and per\n"
"GiB-second of memory in USD (exact decimals; \"-\" where none is published),\n"
"the GPU types it prices, its billing granularity in seconds, the date its\n"
"source was read, and the source. The bundled table is laid under the user's\n"
"file: $SBX_PRICING_FILE, else ${XDG_CONFIG_HOME:-$HOME/.config}/sbx/pricing.json.\n"
"\n"
"      --json   print the merged table as JSON (each entry with its \"origin\",\n"
"               the file it came from)\n"
"  -h, --help   show this help and exit\n"
"\n"
"Exit status: 0; 125 when a pricing file cannot be read or holds a rate that is\n"
"not a decimal number of USD >= 0 (its key, value and file named).\n");
}

/* A rate of femto-dollars per second as an exact decimal (new text in @buf). */
static void format_fusd(int64_t f, char *buf, size_t cap)
{
    char digits[40];
    int n, point;

    n = snprintf(digits, sizeof digits, "%016lld", (long long)f);
    point = n - 15;
    while (n > point && digits[n - 1] == '0')
        n--;
    if (n > point)
        snprintf(buf, cap, "%.*s.%.*s", point, digits, n - point, digits + point);
    else
        snprintf(buf, cap, "%.*s", point, digits);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The rate of one unit of vCPU (@cpu) or memory, or "-" when unpublished.
 * 0, or -1 with the error said when the table holds a rate that is not
 * one (a malformed rate is no "-"). */
static int unit_rate(const char *backend, int cpu, char *buf, size_t cap)
{
    sbx_error *error = NULL;
    int64_t f;

    if (sbx_cost_per_second(backend, cpu ? 1 : 0, cpu ? 0 : 1, NULL, &f, &error) == 0) {
        format_fusd(f, buf, cap);
        return 0;
    }
    if (sbx_error_get_code(error) == SBX_ERROR_NOT_FOUND) {
        sbx_error_free(error);
        snprintf(buf, cap, "-");
        return 0;
    }
    cli_error(error);
    return -1;
}

static const char *member(json_object *o, const char *key)
{
    json_object *v;

    if (!json_object_object_get_ex(o, key, &v) || v == NULL)
        return "-";
    return json_object_get_string(v);
}

static int pricing_main(int argc, char **argv)
{
    int json = 0;
    const cli_option table[] = {
        { "json", 0, 0, &json, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    sbx_error *error = NULL;
    json_object *doc, *backends;
    const char **names;
    char *text;
    size_t count = 0;
    int status = cli_parse_options_only(&cli_command_pricing, argc, argv, table, NULL);

    if (status != CLI_GO_ON)
        return status;
    text = sbx_pricing_to_json(&error);
    if (text == NULL) {
        cli_error(error);
        return CLI_EXIT_TOOL;
    }
    doc = json_tokener_parse(text);
    free(text);
    if (doc == NULL)
        return cli_out_of_memory();
    if (json) {
        cli_print_json(doc);
        return 0;
    }
    json_object_object_get_ex(doc, "backends", &backends);
    names = calloc(json_object_object_length(backends) + 1, sizeof *names);
    if (names == NULL) {
        json_object_put(doc);
        return cli_out_of_memory();
    }
    {
        json_object_object_foreach(backends, name, entry) {
            (void)entry;
            names[count++] = name;
        }
    }
    qsort(names, count, sizeof *names, by_name);
    printf("%-11s %-18s %-18s %-5s %-7s %-11s %s\n", "BACKEND", "USD/VCPU-S", "USD/GIB-S",
           "GPUS", "BILLED", "READ ON", "SOURCE");
    for (size_t i = 0; i < count; i++) {
        json_object *entry = json_object_object_get(backends, names[i]), *gpus, *g;
        char cpu[40], ram[40], billed[32];
        size_t ngpu = 0;

        if (unit_rate(names[i], 1, cpu, sizeof cpu) < 0 ||
            unit_rate(names[i], 0, ram, sizeof ram) < 0) {
            free(names);
            json_object_put(doc);
            return CLI_EXIT_TOOL;
        }
        if (json_object_object_get_ex(entry, "gpu_usd_per_s", &gpus) && gpus != NULL)
            ngpu = (size_t)json_object_object_length(gpus);
        if (json_object_object_get_ex(entry, "billing_granularity_s", &g) && g != NULL &&
            json_object_get_double(g) > 0)
            snprintf(billed, sizeof billed, "%gs", json_object_get_double(g));
        else
            snprintf(billed, sizeof billed, "cont.");
        printf("%-11s %-18s %-18s %-5zu %-7s %-11s ", names[i], cpu, ram, ngpu, billed,
               member(entry, "read_on"));
        cli_print_escaped(member(entry, "source_url"));
        putchar('\n');
    }
    free(names);
    json_object_put(doc);
    return 0;
}

const cli_command cli_command_pricing = {
    "pricing", "pricing [--json]",
    "print the price table of the backends (rates,\nsources, dates)",
    pricing_main, usage
};
