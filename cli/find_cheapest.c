/*
 * sbx find-cheapest: cold start and a fixed workload on each backend over
 * several runs, p50/p90 of each and the estimated cost per run from the
 * price table, sorted; names the cheapest backend that worked. (The
 * reference's find_cheapest ran each backend once and reported no spread.)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* The fixed workload: integer arithmetic in the sandbox's shell, whose
 * output is checked (the sum of i*i for i below 10000). */
#define WORKLOAD "i=0; s=0; while [ $i -lt 10000 ]; do s=$((s + i * i)); i=$((i + 1)); done; " \
                 "echo $s"
#define WORKLOAD_OUT "333283335000\n"
#define MAX_RUNS 100
#define MAX_BACKENDS 32

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx find-cheapest [-b BACKEND,...] [-n RUNS] [--json]\n"
"\n"
"For each backend, RUNS times in turn: create a sandbox (its cold start),\n"
"run a fixed workload in it (a shell loop of 10000 multiplications whose\n"
"output is checked), destroy it. Print the p50 and p90 of the cold start,\n"
"of the workload and of their sum, in seconds, and the estimated cost of one\n"
"run (p50 seconds, rounded up to the backend's billing granularity and\n"
"minimum, at its rate for 1 vCPU and 1 GiB, from the price table: see\n"
"`sbx pricing`), sorted: backends that worked first, cheapest\n"
"first, then fastest. Then the cheapest backend that worked.\n"
"\n"
"  -b, --backend=LIST   comma-separated backends (default: $SBX_BACKEND, else\n"
"                       local)\n"
"  -n, --runs=RUNS      runs per backend, 1 to %d (default 5)\n"
"      --json           print the results as JSON\n"
"  -h, --help           show this help and exit\n"
"\n"
"Exit status: 0 when at least one backend worked; 1 when none did; 125 on\n"
"bad usage.\n", MAX_RUNS);
}

typedef struct bench {
    const char *backend;
    int ok;
    char *error;              /* the first failure */
    int runs;                 /* runs that completed */
    double cold[MAX_RUNS], exec[MAX_RUNS], total[MAX_RUNS];
    int cost_known;
    int64_t cost_pusd;        /* at the p50 total */
} bench;

static struct {
    char *backends;
    long runs;
    int json;
} opts;

static int set_backends(const cli_command *cmd, const char *arg, void *ctx)
{
    (void)cmd;
    (void)ctx;
    free(opts.backends);
    opts.backends = strdup(arg);
    return opts.backends ? CLI_GO_ON : cli_out_of_memory();
}

static int set_runs(const cli_command *cmd, const char *arg, void *ctx)
{
    char *end;

    (void)ctx;
    opts.runs = strtol(arg, &end, 10);
    if (*arg == '\0' || *end != '\0' || opts.runs < 1 || opts.runs > MAX_RUNS)
        return cli_usage_error(cmd, "invalid -n value \"%s\": expected a whole number of runs "
                                    "from 1 to %d", arg, MAX_RUNS);
    return CLI_GO_ON;
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* The @q quantile (nearest rank) of @n values. */
static double quantile(const double *v, int n, double q)
{
    double sorted[MAX_RUNS];
    int rank;

    if (n == 0)
        return 0;
    memcpy(sorted, v, (size_t)n * sizeof *v);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
    rank = (int)ceil(q * n);
    if (rank < 1)
        rank = 1;
    return sorted[rank - 1];
}

static void fail(bench *b, sbx_error *error, const char *what)
{
    if (b->error == NULL) {
        if (error != NULL)
            b->error = strdup(sbx_error_get0_message(error));
        else
            b->error = strdup(what);
    }
    sbx_error_free(error);
    b->ok = 0;
}

static void measure(bench *b, long runs)
{
    sbx_options *options = sbx_options_new();
    sbx_error *error = NULL;

    b->ok = 1;
    if (options == NULL || sbx_options_set_timeout_secs(options, 120, &error) < 0) {
        fail(b, error, "out of memory");
        sbx_options_free(options);
        return;
    }
    for (long i = 0; i < runs && b->ok && cli_signal == 0; i++) {
        double t0 = now(), t1, t2;
        sbx_sandbox *sandbox = sbx_create(b->backend, options, &error);
        sbx_result *r;

        t1 = now();
        if (sandbox == NULL) {
            fail(b, error, "create failed");
            break;
        }
        r = sbx_sandbox_execute_shell(sandbox, WORKLOAD, &error);
        t2 = now();
        if (r == NULL) {
            fail(b, error, "exec failed");
        } else if (sbx_result_get_exit_code(r) != 0 ||
                   strcmp(sbx_result_get0_stdout(r, NULL), WORKLOAD_OUT) != 0) {
            char msg[160];

            snprintf(msg, sizeof msg, "the workload exited with code %d and printed \"%.40s\"",
                     sbx_result_get_exit_code(r), sbx_result_get0_stdout(r, NULL));
            fail(b, NULL, msg);
        } else {
            b->cold[b->runs] = t1 - t0;
            b->exec[b->runs] = t2 - t1;
            b->total[b->runs] = t2 - t0;
            b->runs++;
        }
        sbx_result_free(r);
        if (sbx_sandbox_destroy(sandbox, &error) < 0)
            fail(b, error, "destroy failed");
        sbx_sandbox_free(sandbox);
    }
    sbx_options_free(options);
    /* Priced as usage prices a lifetime: the p50 run's seconds rounded up
     * to the backend's billing granularity and raised to its minimum. */
    if (b->ok && b->runs > 0 &&
        sbx_cost_of_duration(b->backend, SBX_DEFAULT_CPU, SBX_DEFAULT_MEMORY_MB / 1024.0, NULL,
                             quantile(b->total, b->runs, 0.5), &b->cost_pusd, NULL) == 0)
        b->cost_known = 1;
}

static int by_result(const void *pa, const void *pb)
{
    const bench *a = pa, *b = pb;

    if (a->ok != b->ok)
        return b->ok - a->ok;
    if (a->cost_known != b->cost_known)
        return b->cost_known - a->cost_known;
    if (a->cost_known && a->cost_pusd != b->cost_pusd)
        return a->cost_pusd < b->cost_pusd ? -1 : 1;
    return cmp_double(&(double){ quantile(a->total, a->runs, 0.5) },
                      &(double){ quantile(b->total, b->runs, 0.5) });
}

static json_object *secs_json(double s)
{
    char buf[32];

    snprintf(buf, sizeof buf, "%.6f", s);
    return json_object_new_double_s(s, buf);
}

static int find_cheapest_main(int argc, char **argv)
{
    const cli_option table[] = {
        { "backend", 'b', 1, NULL, set_backends },
        { "runs", 'n', 1, NULL, set_runs },
        { "json", 0, 0, &opts.json, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    bench benches[MAX_BACKENDS];
    size_t n = 0;
    char *save = NULL;
    const bench *cheapest = NULL;
    int status;

    memset(benches, 0, sizeof benches);
    opts.runs = 5;
    status = cli_parse_options_only(&cli_command_find_cheapest, argc, argv, table, NULL);
    if (status == CLI_GO_ON && opts.backends == NULL &&
        (opts.backends = strdup(cli_default_backend())) == NULL)
        status = cli_out_of_memory();
    if (status != CLI_GO_ON) {
        free(opts.backends);
        return status;
    }
    for (char *t = strtok_r(opts.backends, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*t == '\0')
            continue;
        if (n == MAX_BACKENDS) {
            free(opts.backends);
            return cli_usage_error(&cli_command_find_cheapest, "more than %d backends",
                                   MAX_BACKENDS);
        }
        benches[n++].backend = t;
    }
    for (size_t i = 0; i < n && cli_signal == 0; i++)
        measure(&benches[i], opts.runs);
    qsort(benches, n, sizeof *benches, by_result);
    for (size_t i = 0; i < n; i++)
        if (benches[i].ok && benches[i].runs > 0) {
            cheapest = &benches[i];
            break;
        }
    if (opts.json) {
        json_object *doc = json_object_new_object(), *results = json_object_new_array();

        for (size_t i = 0; i < n; i++) {
            const bench *b = &benches[i];
            json_object *o = json_object_new_object();
            char buf[SBX_USD_FORMAT_SIZE];

            json_object_object_add(o, "backend", json_object_new_string(b->backend));
            json_object_object_add(o, "ok", json_object_new_boolean(b->ok && b->runs > 0));
            json_object_object_add(o, "runs", json_object_new_int(b->runs));
            json_object_object_add(o, "cold_p50_s", secs_json(quantile(b->cold, b->runs, .5)));
            json_object_object_add(o, "cold_p90_s", secs_json(quantile(b->cold, b->runs, .9)));
            json_object_object_add(o, "exec_p50_s", secs_json(quantile(b->exec, b->runs, .5)));
            json_object_object_add(o, "exec_p90_s", secs_json(quantile(b->exec, b->runs, .9)));
            json_object_object_add(o, "total_p50_s", secs_json(quantile(b->total, b->runs, .5)));
            json_object_object_add(o, "total_p90_s", secs_json(quantile(b->total, b->runs, .9)));
            if (b->cost_known) {
                sbx_usd_format(b->cost_pusd, buf, sizeof buf);
                json_object_object_add(o, "cost_per_run_usd",
                                       json_object_new_double_s((double)b->cost_pusd / 1e12,
                                                                buf));
            } else {
                json_object_object_add(o, "cost_per_run_usd", NULL);
            }
            cli_json_add_string(o, "error", b->error);
            json_object_array_add(results, o);
        }
        json_object_object_add(doc, "results", results);
        cli_json_add_string(doc, "cheapest", cheapest ? cheapest->backend : NULL);
        cli_print_json(doc);
    } else {
        printf("%-11s %-4s %-8s %-8s %-8s %-8s %-8s %-8s %-16s %s\n", "BACKEND", "RUNS",
               "COLD50", "COLD90", "EXEC50", "EXEC90", "TOTAL50", "TOTAL90", "USD/RUN", "STATUS");
        for (size_t i = 0; i < n; i++) {
            const bench *b = &benches[i];
            char cost[SBX_USD_FORMAT_SIZE] = "-";

            if (b->cost_known)
                sbx_usd_format(b->cost_pusd, cost, sizeof cost);
            printf("%-11s %-4d %-8.3f %-8.3f %-8.3f %-8.3f %-8.3f %-8.3f %-16s ", b->backend,
                   b->runs, quantile(b->cold, b->runs, .5), quantile(b->cold, b->runs, .9),
                   quantile(b->exec, b->runs, .5), quantile(b->exec, b->runs, .9),
                   quantile(b->total, b->runs, .5), quantile(b->total, b->runs, .9), cost);
            if (b->ok && b->runs > 0)
                printf("ok\n");
            else {
                printf("failed: ");
                cli_print_escaped(b->error ? b->error : "interrupted");
                putchar('\n');
            }
        }
        if (cheapest) {
            char cost[SBX_USD_FORMAT_SIZE] = "unknown";

            if (cheapest->cost_known)
                sbx_usd_format(cheapest->cost_pusd, cost, sizeof cost);
            printf("-> Cheapest available: %s (%s%s/run)\n", cheapest->backend,
                   cheapest->cost_known ? "$" : "", cost);
        } else {
            printf("-> No backend worked\n");
        }
    }
    for (size_t i = 0; i < n; i++)
        free(benches[i].error);
    free(opts.backends);
    opts.backends = NULL;
    return cheapest ? 0 : 1;
}

const cli_command cli_command_find_cheapest = {
    "find-cheapest", "find-cheapest [-b BACKEND,...] [-n RUNS] [--json]",
    "measure cold start and a workload per backend; the\ncheapest that works",
    find_cheapest_main, usage
};
