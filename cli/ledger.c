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
"Exit status: 0; 125 when a file cannot be read, a line is not a record or\n"
"holds a count or amount that is not one (negative, not a number), or a sum\n"
"does not fit (its file, line, member and value named).\n");
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

/* Adds the token count @key of @rec (absent: 0) to *@sum. 0, or -1 with
 * *@why set when it is not an integer >= 0 or the sum does not fit. */
static int add_count(json_object *rec, const char *key, int64_t *sum, const char **why)
{
    json_object *v;
    int64_t x;

    if (!json_object_object_get_ex(rec, key, &v) || v == NULL)
        return 0;
    if (!json_object_is_type(v, json_type_int) ||
        json_object_get_uint64(v) > (uint64_t)INT64_MAX || (x = json_object_get_int64(v)) < 0) {
        *why = "is not a count (an integer >= 0)";
        return -1;
    }
    if (__builtin_add_overflow(*sum, x, sum)) {
        *why = "makes a sum past 9223372036854775807";
        return -1;
    }
    return 0;
}

/* Adds the money member @key of @rec to *@sum, or counts it unknown. 0, or
 * -1 with *@why set when it is neither an amount >= 0 nor null, or the sum
 * does not fit. */
static int add_money(json_object *rec, const char *key, int64_t *sum, int64_t *unknown,
                     const char **why)
{
    json_object *v;
    int64_t x;

    if (!json_object_object_get_ex(rec, key, &v) || v == NULL) {
        (*unknown)++;
        return 0;
    }
    if ((!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double)) ||
        sbx_usd_parse(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN), &x,
                      NULL) < 0 || x < 0) {
        *why = "is not an amount of USD >= 0 that fits";
        return -1;
    }
    if (__builtin_add_overflow(*sum, x, sum)) {
        *why = "makes a sum past what an amount holds (about 9.2 million USD)";
        return -1;
    }
    return 0;
}

/* @src added into @dst; -1 when a sum does not fit. */
static int add(totals *dst, const totals *src)
{
    int64_t total;

    return __builtin_add_overflow(dst->sandboxes, src->sandboxes, &dst->sandboxes) ||
           __builtin_add_overflow(dst->calls, src->calls, &dst->calls) ||
           __builtin_add_overflow(dst->tokens, src->tokens, &dst->tokens) ||
           __builtin_add_overflow(dst->llm_pusd, src->llm_pusd, &dst->llm_pusd) ||
           __builtin_add_overflow(dst->llm_unknown, src->llm_unknown, &dst->llm_unknown) ||
           __builtin_add_overflow(dst->compute_pusd, src->compute_pusd, &dst->compute_pusd) ||
           __builtin_add_overflow(dst->compute_unknown, src->compute_unknown,
                                  &dst->compute_unknown) ||
           __builtin_add_overflow(dst->llm_pusd, dst->compute_pusd, &total) ? -1 : 0;
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
            static const char *const tokens[] = { "input_tokens", "output_tokens",
                                                  "reasoning_tokens", "cache_read_tokens",
                                                  "cache_write_tokens", NULL };
            json_object *rec;
            const char *kind, *backend, *why = NULL, *key = NULL;
            totals *row, next;
            int bad = 0;

            lineno++;
            if (len == 0 || (len == 1 && line[0] == '\n'))
                continue;
            rec = json_tokener_parse(line);
            kind = rec ? json_object_get_string(json_object_object_get(rec, "kind")) : NULL;
            backend = rec ? json_object_get_string(json_object_object_get(rec, "backend")) : NULL;
            row = kind && backend ? find(t, &n, backend) : NULL;
            if (kind && backend && row == NULL) {
                cli_msg("%s:%zu: more than %d backends", argv[a], lineno, MAX_BACKENDS);
                bad = 2;
            } else if (row == NULL) {
                bad = 1;
            } else if (strcmp(kind, "agent_call") == 0) {
                /* Summed into a copy: a bad record changes no total. */
                next = *row;
                next.calls++;
                for (size_t i = 0; !bad && tokens[i]; i++) {
                    key = tokens[i];
                    bad = add_count(rec, key, &next.tokens, &why) < 0;
                }
                if (!bad) {
                    key = "llm_cost_usd";
                    bad = add_money(rec, key, &next.llm_pusd, &next.llm_unknown, &why) < 0;
                }
                if (!bad)
                    *row = next;
            } else if (strcmp(kind, "sandbox") == 0) {
                next = *row;
                next.sandboxes++;
                key = "compute_cost_usd";
                bad = add_money(rec, key, &next.compute_pusd, &next.compute_unknown, &why) < 0;
                if (!bad)
                    *row = next;
            } else {
                bad = 1;
            }
            if (bad == 1 && why)
                cli_msg("%s:%zu: %s %s %s", argv[a], lineno, key,
                        json_object_to_json_string_ext(json_object_object_get(rec, key),
                                                       JSON_C_TO_STRING_PLAIN), why);
            else if (bad == 1)
                cli_msg("%s:%zu: not a ledger record", argv[a], lineno);
            json_object_put(rec);
            if (bad) {
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
        if (add(&all, &t[i]) < 0) {
            cli_msg("the totals pass what an amount holds (about 9.2 million USD)");
            return CLI_EXIT_TOOL;
        }
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
    "sum ledger files exactly: sandboxes, agent calls,\ntokens, costs",
    ledger_main, usage
};
