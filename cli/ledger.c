/*
 * sbx ledger: the exact totals of ledger files (SBX_LEDGER,
 * sbx_client_set_ledger), per backend.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx ledger [--json] FILE...\n"
"\n"
"Sum ledger files (one JSON record a line, as SBX_LEDGER writes them) per\n"
"backend and in all: sandbox lifetimes and their compute cost, agent calls,\n"
"their tokens and their LLM cost, and the total cost (LLM + compute). Money is\n"
"summed as exact decimals. A cost a record gives as null (unknown) is counted\n"
"apart; the sums are then what is known.\n"
"\n"
"      --json   print the totals as JSON\n"
"  -h, --help   show this help and exit\n"
"\n"
"Exit status: 0; 125 when a file cannot be read or a line is not a record\n"
"(its file and line named).\n");
}

typedef struct totals {
    char backend[64];
    int64_t sandboxes, calls, tokens, llm_pusd, llm_unknown, compute_pusd, compute_unknown;
} totals;

#define MAX_BACKENDS 64

static totals *find(totals *t, size_t *n, const char *backend)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(t[i].backend, backend) == 0)
            return &t[i];
    if (*n == MAX_BACKENDS)
        return NULL;
    memset(&t[*n], 0, sizeof t[*n]);
    snprintf(t[*n].backend, sizeof t[*n].backend, "%s", backend);
    return &t[(*n)++];
}

static int64_t get_int(json_object *o, const char *key)
{
    json_object *v;

    return json_object_object_get_ex(o, key, &v) && v ? json_object_get_int64(v) : 0;
}

/* Adds the money member @key of @rec to *@sum, or counts it unknown. 0, or
 * -1 when it is neither a number nor null. */
static int add_money(json_object *rec, const char *key, int64_t *sum, int64_t *unknown)
{
    json_object *v;
    int64_t x;

    if (!json_object_object_get_ex(rec, key, &v) || v == NULL) {
        (*unknown)++;
        return 0;
    }
    if (sbx_usd_parse(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN), &x, NULL) < 0)
        return -1;
    *sum += x;
    return 0;
}

static void add(totals *dst, const totals *src)
{
    dst->sandboxes += src->sandboxes;
    dst->calls += src->calls;
    dst->tokens += src->tokens;
    dst->llm_pusd += src->llm_pusd;
    dst->llm_unknown += src->llm_unknown;
    dst->compute_pusd += src->compute_pusd;
    dst->compute_unknown += src->compute_unknown;
}

static json_object *usd(int64_t pusd)
{
    char buf[SBX_USD_FORMAT_SIZE];

    sbx_usd_format(pusd, buf, sizeof buf);
    return json_object_new_double_s((double)pusd / 1e12, buf);
}

static json_object *totals_json(const totals *t)
{
    json_object *o = json_object_new_object();

    json_object_object_add(o, "backend", json_object_new_string(t->backend));
    json_object_object_add(o, "sandboxes", json_object_new_int64(t->sandboxes));
    json_object_object_add(o, "agent_calls", json_object_new_int64(t->calls));
    json_object_object_add(o, "tokens", json_object_new_int64(t->tokens));
    json_object_object_add(o, "llm_cost_usd", usd(t->llm_pusd));
    json_object_object_add(o, "llm_cost_unknown_calls", json_object_new_int64(t->llm_unknown));
    json_object_object_add(o, "compute_cost_usd", usd(t->compute_pusd));
    json_object_object_add(o, "compute_cost_unknown_sandboxes",
                           json_object_new_int64(t->compute_unknown));
    json_object_object_add(o, "total_cost_usd", usd(t->llm_pusd + t->compute_pusd));
    return o;
}

static void print_row(const totals *t)
{
    char llm[SBX_USD_FORMAT_SIZE], compute[SBX_USD_FORMAT_SIZE], total[SBX_USD_FORMAT_SIZE];
    char unknown[48] = "";

    sbx_usd_format(t->llm_pusd, llm, sizeof llm);
    sbx_usd_format(t->compute_pusd, compute, sizeof compute);
    sbx_usd_format(t->llm_pusd + t->compute_pusd, total, sizeof total);
    if (t->llm_unknown || t->compute_unknown)
        snprintf(unknown, sizeof unknown, " (unknown: %lld llm, %lld compute)",
                 (long long)t->llm_unknown, (long long)t->compute_unknown);
    printf("%-11s %-9lld %-7lld %-10lld %-14s %-14s %s%s\n", t->backend,
           (long long)t->sandboxes, (long long)t->calls, (long long)t->tokens, llm, compute,
           total, unknown);
}

static int ledger_main(int argc, char **argv)
{
    int json = 0;
    const cli_option table[] = {
        { "json", 0, 0, &json, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    totals t[MAX_BACKENDS], all;
    size_t n = 0;
    int status = cli_parse_options(&cli_command_ledger, argc, argv, table, NULL);

    if (status != CLI_GO_ON)
        return status;
    if (optind >= argc)
        return cli_usage_error(&cli_command_ledger, "no ledger file given");
    for (int a = optind; a < argc; a++) {
        FILE *f = fopen(argv[a], "r");
        char *line = NULL;
        size_t cap = 0, lineno = 0;
        ssize_t len;

        if (f == NULL) {
            cli_msg("cannot read the ledger %s: %s", argv[a], strerror(errno));
            return CLI_EXIT_TOOL;
        }
        while ((len = getline(&line, &cap, f)) >= 0) {
            json_object *rec;
            const char *kind, *backend;
            totals *row;
            int bad = 0;

            lineno++;
            if (len == 0 || (len == 1 && line[0] == '\n'))
                continue;
            rec = json_tokener_parse(line);
            kind = rec ? json_object_get_string(json_object_object_get(rec, "kind")) : NULL;
            backend = rec ? json_object_get_string(json_object_object_get(rec, "backend")) : NULL;
            row = kind && backend ? find(t, &n, backend) : NULL;
            if (row == NULL) {
                bad = 1;
            } else if (strcmp(kind, "agent_call") == 0) {
                row->calls++;
                row->tokens += get_int(rec, "input_tokens") + get_int(rec, "output_tokens") +
                               get_int(rec, "reasoning_tokens") +
                               get_int(rec, "cache_read_tokens") +
                               get_int(rec, "cache_write_tokens");
                bad = add_money(rec, "llm_cost_usd", &row->llm_pusd, &row->llm_unknown) < 0;
            } else if (strcmp(kind, "sandbox") == 0) {
                row->sandboxes++;
                bad = add_money(rec, "compute_cost_usd", &row->compute_pusd,
                                &row->compute_unknown) < 0;
            } else {
                bad = 1;
            }
            json_object_put(rec);
            if (bad) {
                cli_msg("%s:%zu: not a ledger record", argv[a], lineno);
                free(line);
                fclose(f);
                return CLI_EXIT_TOOL;
            }
        }
        free(line);
        fclose(f);
    }
    memset(&all, 0, sizeof all);
    snprintf(all.backend, sizeof all.backend, "all");
    for (size_t i = 0; i < n; i++)
        add(&all, &t[i]);
    if (json) {
        json_object *doc = json_object_new_object(), *rows = json_object_new_array();

        for (size_t i = 0; i < n; i++)
            json_object_array_add(rows, totals_json(&t[i]));
        json_object_object_add(doc, "backends", rows);
        json_object_object_add(doc, "all", totals_json(&all));
        cli_print_json(doc);
        return 0;
    }
    printf("%-11s %-9s %-7s %-10s %-14s %-14s %s\n", "BACKEND", "SANDBOXES", "CALLS", "TOKENS",
           "LLM USD", "COMPUTE USD", "TOTAL USD");
    for (size_t i = 0; i < n; i++)
        print_row(&t[i]);
    print_row(&all);
    return 0;
}

const cli_command cli_command_ledger = {
    "ledger", "ledger [--json] FILE...",
    "sum ledger files exactly: sandboxes, agent calls, tokens, costs",
    ledger_main, usage
};
