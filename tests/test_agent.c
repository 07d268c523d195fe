/*
 * Agents and cost: the price table and sbx_cost_per_second, exact money,
 * sbx_sandbox_run_agent for Claude Code, Codex and OpenCode against the
 * stand-in CLIs of tests/agents (CASE-41, CASE-48, CASE-56 and more of each
 * CLI's documented shapes), the running usage of sandboxes and clients and
 * the ledger of JSON lines. On local: the stand-ins are host scripts put on
 * the sandbox's PATH through the call's environment.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include <sbx/sbx.h>

#include "testutil.h"

/* ------------------------------------------------------------ helpers */

/* A private config home (no user pricing file unless a test writes one). */
static char *config_home;

static void
isolate(void)
{
    config_home = tu_mkdtemp("sbx-agent-config-");
    setenv("XDG_CONFIG_HOME", config_home, 1);
    unsetenv("SBX_PRICING_FILE");
    unsetenv("SBX_PRICING_DATA");
    unsetenv("SBX_LEDGER");
}

static void
cleanup(void)
{
    if (config_home) {
        tu_rmtree(config_home);
        free(config_home);
        config_home = NULL;
    }
}

/* Writes @json as the user's pricing file (SBX_PRICING_FILE). */
static void
user_pricing(const char *json)
{
    char *path = tu_strdup_printf("%s/pricing.json", config_home);

    tu_write_file(path, json, strlen(json), 0644);
    setenv("SBX_PRICING_FILE", path, 1);
    free(path);
}

static int64_t
fusd(const char *backend, double vcpu, double ram, const char *gpu)
{
    sbx_error *err = NULL;
    int64_t v = -1;

    cr_assert_eq(sbx_cost_per_second(backend, vcpu, ram, gpu, &v, &err), 0,
                 "%s: %s", backend, err ? sbx_error_get0_message(err) : "");
    return v;
}

static void
assert_usd(int64_t pusd, const char *want)
{
    char buf[SBX_USD_FORMAT_SIZE];

    cr_assert(sbx_usd_format(pusd, buf, sizeof buf) > 0);
    cr_assert_str_eq(buf, want, "%lld pico-dollars print as %s, expected %s",
                     (long long)pusd, buf, want);
}

static sbx_client *client;
static sbx_sandbox *sandbox;
static char *path_env;

static void
agent_setup(void)
{
    sbx_error *err = NULL;

    isolate();
    path_env = tu_strdup_printf("PATH=%s/agents:/usr/local/bin:/usr/bin:/bin",
                                getenv("SBX_TEST_SRCDIR"));
    client = sbx_client_new("local", &err);
    cr_assert_not_null(client, "%s", err ? sbx_error_get0_message(err) : "");
    sandbox = tu_create(client, NULL);
}

static void
agent_teardown(void)
{
    if (sandbox) {
        sbx_sandbox_destroy(sandbox, NULL);
        sbx_sandbox_free(sandbox);
        sandbox = NULL;
    }
    sbx_client_free(client);
    client = NULL;
    free(path_env);
    cleanup();
}

/* Runs @prompt (a fixture name) with @harness; asserts the call worked. */
static sbx_agent_run *
run_fixture(sbx_agent_harness harness, const char *prompt)
{
    const char *env[] = { path_env, NULL };
    sbx_agent_request req = SBX_AGENT_REQUEST_INIT;
    sbx_error *err = NULL;
    sbx_agent_run *run;

    req.harness = harness;
    req.prompt = prompt;
    req.env = env;
    run = sbx_sandbox_run_agent(sandbox, &req, &err);
    cr_assert_not_null(run, "%s: %s", prompt, err ? sbx_error_get0_message(err) : "");
    return run;
}

/* Runs @prompt and asserts that the call FAILED with @code. */
static sbx_error *
run_fixture_fail(sbx_agent_harness harness, const char *prompt, const char *command,
                 sbx_error_code code)
{
    const char *env[] = { path_env, NULL };
    sbx_agent_request req = SBX_AGENT_REQUEST_INIT;
    sbx_error *err = NULL;

    req.harness = harness;
    req.prompt = prompt;
    req.env = env;
    req.command = command;
    cr_assert_null(sbx_sandbox_run_agent(sandbox, &req, &err), "%s: a run came back", prompt);
    tu_assert_error(err, code, NULL);
    return err;
}

static sbx_usage
usage_of(const sbx_agent_run *run)
{
    sbx_usage u = SBX_USAGE_INIT;

    cr_assert_eq(sbx_agent_run_get_usage(run, &u), 0);
    return u;
}

static void
assert_tokens(const sbx_usage *u, int64_t input, int64_t output, int64_t reasoning,
              int64_t cache_read, int64_t cache_write)
{
    cr_assert_eq(u->input_tokens, input, "input %lld", (long long)u->input_tokens);
    cr_assert_eq(u->output_tokens, output, "output %lld", (long long)u->output_tokens);
    cr_assert_eq(u->reasoning_tokens, reasoning, "reasoning %lld",
                 (long long)u->reasoning_tokens);
    cr_assert_eq(u->cache_read_tokens, cache_read, "cache_read %lld",
                 (long long)u->cache_read_tokens);
    cr_assert_eq(u->cache_write_tokens, cache_write, "cache_write %lld",
                 (long long)u->cache_write_tokens);
}

/* The call's LLM cost is known and prints as @want. */
static void
assert_llm_cost(const sbx_usage *u, const char *want)
{
    cr_assert_eq(u->llm_cost_unknown, 0, "the cost is unknown, expected %s", want);
    assert_usd(u->llm_cost_pusd, want);
}

static void
assert_succeeded(const sbx_agent_run *run, const char *text)
{
    cr_assert_eq(sbx_agent_run_get_status(run), SBX_AGENT_SUCCEEDED, "failed: %s",
                 sbx_agent_run_get0_reason(run));
    cr_assert_str_eq(sbx_agent_run_get0_text(run), text);
    cr_assert_null(sbx_agent_run_get0_reason(run));
    cr_assert_eq(sbx_agent_run_get_error_code(run), 0);
}

static void
assert_failed(const sbx_agent_run *run, const char *reason, sbx_error_code code)
{
    cr_assert_eq(sbx_agent_run_get_status(run), SBX_AGENT_FAILED, "succeeded");
    cr_assert_null(sbx_agent_run_get0_text(run), "a failed run has text \"%s\"",
                   sbx_agent_run_get0_text(run));
    cr_assert_str_eq(sbx_agent_run_get0_reason(run), reason);
    cr_assert_eq(sbx_agent_run_get_error_code(run), code, "error code %s, expected %s",
                 sbx_error_code_name(sbx_agent_run_get_error_code(run)),
                 sbx_error_code_name(code));
}

/* An exec that fails under the agent (a working directory that is not
 * there) is the caller's run_agent that failed: its op says so. */
Test(claude, a_failed_exec_is_named_run_agent)
{
    const char *env[] = { path_env, NULL };
    sbx_agent_request req = SBX_AGENT_REQUEST_INIT;
    sbx_error *err = NULL;

    req.harness = SBX_AGENT_CLAUDE_CODE;
    req.prompt = "U1";
    req.env = env;
    req.cwd = "/no/such/dir";
    cr_assert_null(sbx_sandbox_run_agent(sandbox, &req, &err));
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "/no/such/dir", NULL);
    cr_assert_str_eq(sbx_error_get0_op(err), "run_agent");
    cr_assert_str_eq(sbx_error_get0_backend(err), "local");     /* agent_setup's */
    sbx_error_free(err);
}

/* ------------------------------------------------------------ money */

Test(money, usd_format_is_exact)
{
    char small[4];

    assert_usd(11117000000, "0.011117");
    assert_usd(73124500000, "0.0731245");
    assert_usd(31500000000000, "31.5");
    assert_usd(0, "0");
    assert_usd(1, "0.000000000001");
    assert_usd(-250000000000, "-0.25");
    cr_assert_eq(sbx_usd_format(11117000000, small, sizeof small), -1);
    cr_assert_eq(sbx_usd_format(1, NULL, 10), -1);
}

Test(money, usd_parse_reads_json_numbers_exactly)
{
    sbx_error *err = NULL;
    int64_t a, b;

    cr_assert_eq(sbx_usd_parse("0.0070147", &a, &err), 0);
    cr_assert_eq(sbx_usd_parse("0.0041023", &b, &err), 0);
    assert_usd(a + b, "0.011117");
    cr_assert_eq(sbx_usd_parse("1e-5", &a, &err), 0);
    cr_assert_eq(a, INT64_C(10000000));
    cr_assert_eq(sbx_usd_parse("-31.5", &a, &err), 0);
    assert_usd(a, "-31.5");
    /* Past the twelfth decimal: rounded half away from zero. */
    cr_assert_eq(sbx_usd_parse("0.0000000000015", &a, &err), 0);
    cr_assert_eq(a, 2);
    cr_assert_eq(sbx_usd_parse("12abc", &a, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "\"12abc\"", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_usd_parse("99999999", &a, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "99999999", NULL);
    sbx_error_clear(&err);
    /* The ends of the range read back as they are printed, and one
     * pico-dollar past either is refused. */
    assert_usd(INT64_MIN, "-9223372.036854775808");
    cr_assert_eq(sbx_usd_parse("-9223372.036854775808", &a, &err), 0);
    cr_assert_eq(a, INT64_MIN);
    assert_usd(INT64_MAX, "9223372.036854775807");
    cr_assert_eq(sbx_usd_parse("9223372.036854775807", &a, &err), 0);
    cr_assert_eq(a, INT64_MAX);
    cr_assert_eq(sbx_usd_parse("-9223372.036854775809", &a, &err), -1);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_usd_parse("9223372.036854775808", &a, &err), -1);
    sbx_error_free(err);
}

/* Amounts with more decimals than a pico-dollar holds, or written with a
 * far exponent, are numbers all the same: rounded, never refused, and a
 * digit dropped is the first one past the twelfth decimal, whatever the
 * notation (5e-14 is 0.00000000000005, which rounds to 0). */
Test(money, usd_parse_rounds_long_fractions_and_far_exponents)
{
    sbx_error *err = NULL;
    int64_t a = -1;

    cr_assert_eq(sbx_usd_parse("0.000000000000000000000000000000000000000000000000000000000"
                               "00000000001", &a, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(a, 0);
    cr_assert_eq(sbx_usd_parse("1.000000000000000000000000000000000000000000000000000000000"
                               "000000000000", &a, &err), 0);
    cr_assert_eq(a, INT64_C(1000000000000));
    cr_assert_eq(sbx_usd_parse("0.0000138888888888888888888888888888888888888888888888888"
                               "888888888888888888889", &a, &err), 0);
    cr_assert_eq(a, INT64_C(13888889));
    cr_assert_eq(sbx_usd_parse("5e-14", &a, &err), 0);
    cr_assert_eq(a, 0);
    cr_assert_eq(sbx_usd_parse("0.00000000000005", &a, &err), 0);
    cr_assert_eq(a, 0);
    cr_assert_eq(sbx_usd_parse("5e-13", &a, &err), 0);
    cr_assert_eq(a, 1);
    cr_assert_eq(sbx_usd_parse("1e-41", &a, &err), 0);
    cr_assert_eq(a, 0);
    cr_assert_eq(sbx_usd_parse("0e999", &a, &err), 0);
    cr_assert_eq(a, 0);
    cr_assert_eq(sbx_usd_parse("1e41", &a, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "\"1e41\"", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_usd_parse("1" "0000000000" "0000000000" "0000000000" "0000000000"
                               "0000000000" "0000000000" "0000", &a, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL);
    sbx_error_clear(&err);
    /* A NULL result pointer is named as such, not as a bad amount. */
    cr_assert_eq(sbx_usd_parse("1", NULL, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "pusd is NULL", NULL);
    sbx_error_free(err);
}

/* ------------------------------------------------------------ pricing */

TestSuite(pricing, .init = isolate, .fini = cleanup);

Test(pricing, cost_per_second_from_the_bundled_table)
{
    /* e2b: 0.000014 + 0.0000045 per second. */
    cr_assert_eq(fusd("e2b", 1, 1, NULL), INT64_C(18500000000));
    /* daytona: (2 × 0.0504 + 4 × 0.0162) per hour = 0.000046 per second. */
    cr_assert_eq(fusd("daytona", 2, 4, NULL), INT64_C(46000000000));
    /* tensorlake: 0.065 per hour, not a finite decimal per second. */
    cr_assert_eq(fusd("tensorlake", 1, 1, NULL), INT64_C(18055555556));
    /* modal: two H100 at 0.001097 each. */
    cr_assert_eq(fusd("modal", 0, 0, "H100:2"), INT64_C(2194000000000));
    cr_assert_eq(fusd("cloudflare", 1, 1, NULL), INT64_C(22500000000));
    cr_assert_eq(fusd("blaxel", 2, 4, NULL), INT64_C(46000000000));
    cr_assert_eq(fusd("local", 4, 8, NULL), 0);
    cr_assert_eq(fusd("docker", 4, 8, NULL), 0);
}

Test(pricing, unknown_prices_are_errors_naming_what_is_missing)
{
    sbx_error *err = NULL;
    int64_t v = 7;

    cr_assert_eq(sbx_cost_per_second("nosuchcloud", 1, 1, NULL, &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "nosuchcloud", NULL);
    /* The backend is the error's field, said once. */
    cr_assert_str_eq(sbx_error_get0_backend(err), "nosuchcloud");
    cr_assert_null(sbx_error_get0_context(err, "backend"));
    cr_assert_eq(v, 0);
    sbx_error_clear(&err);
    /* RunPod pods are priced live: no list rate for a vCPU. */
    cr_assert_eq(sbx_cost_per_second("runpod", 1, 1, NULL, &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "runpod", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_cost_per_second("modal", 1, 1, "Z99", &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "Z99", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "gpu"), "Z99");
    sbx_error_clear(&err);
    cr_assert_eq(sbx_cost_per_second("modal", 1, 1, "H100:x", &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "H100:x", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_cost_per_second("e2b", -1, 1, NULL, &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "vcpu -1", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_cost_per_second("e2b", 1, 1, NULL, NULL, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL);
    sbx_error_clear(&err);
}

Test(pricing, entries_carry_their_source_and_date)
{
    sbx_error *err = NULL;
    char *entry = sbx_pricing_get_entry("e2b", &err), *all;
    json_object *o, *doc, *backends, *v;
    static const char *const backends_of_the_project[] = {
        "local", "bubblewrap", "safehouse", "docker", "ray", "kubernetes", "e2b", "daytona",
        "tensorlake", "modal", "runpod", "vercel", "cloudflare", "blaxel", "runloop", NULL
    };

    cr_assert_not_null(entry, "%s", err ? sbx_error_get0_message(err) : "");
    o = json_tokener_parse(entry);
    cr_assert_not_null(o);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(o, "source_url")),
                     "https://e2b.dev/docs/faq/calculate-sandbox-price");
    cr_assert_str_eq(json_object_get_string(json_object_object_get(o, "read_on")), "2026-08");
    cr_assert(strstr(entry, "\"vcpu_usd_per_s\":0.000014,"), "%s", entry);
    cr_assert(strstr(json_object_get_string(json_object_object_get(o, "origin")),
                     "pricing/pricing.json"));
    json_object_put(o);
    free(entry);

    all = sbx_pricing_to_json(&err);
    cr_assert_not_null(all);
    doc = json_tokener_parse(all);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(doc, "last_updated")),
                     "2026-12-04");
    backends = json_object_object_get(doc, "backends");
    for (size_t i = 0; backends_of_the_project[i]; i++) {
        cr_assert(json_object_object_get_ex(backends, backends_of_the_project[i], &v),
                  "no entry for %s", backends_of_the_project[i]);
        cr_assert(json_object_object_get_ex(v, "source_url", NULL));
        cr_assert(json_object_object_get_ex(v, "read_on", NULL));
        cr_assert(json_object_object_get_ex(v, "billing_granularity_s", NULL));
        cr_assert(json_object_object_get_ex(v, "free_tier", NULL));
    }
    json_object_put(doc);
    free(all);

    cr_assert_null(sbx_pricing_get_entry("nosuchcloud", &err));
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "nosuchcloud", NULL);
    cr_assert_str_eq(sbx_error_get0_backend(err), "nosuchcloud");
    cr_assert_null(sbx_error_get0_context(err, "backend"));
    sbx_error_free(err);
}

/* sbx_cost_of_duration rounds up to the billing step, then to the minimum,
 * and prices once: 61 s by the minute with a 120 s minimum is 120 s. */
Test(pricing, a_duration_is_billed_by_the_granularity_and_minimum)
{
    sbx_error *err = NULL;
    int64_t v = -1;

    user_pricing("{\"backends\":{\"local\":{\"vcpu_usd_per_h\":3.6,\"ram_gib_usd_per_h\":0,"
                 "\"billing_granularity_s\":60,\"minimum_s\":120}}}");
    cr_assert_eq(sbx_cost_of_duration("local", 1, 1, NULL, 61, &v, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    assert_usd(v, "0.12");
    cr_assert_eq(sbx_cost_of_duration("local", 2, 1, NULL, 121, &v, &err), 0);
    assert_usd(v, "0.36");
    cr_assert_eq(sbx_cost_of_duration("local", 1, 1, NULL, -5, &v, &err), 0);
    assert_usd(v, "0.12");
    /* The bundled e2b rate is billed by the second: 1.5 s of 2 vCPUs and
     * 1 GiB is 2 s × (2 × 0.000014 + 0.0000045). */
    unsetenv("SBX_PRICING_FILE");
    cr_assert_eq(sbx_cost_of_duration("e2b", 2, 1, NULL, 1.5, &v, &err), 0);
    assert_usd(v, "0.000065");
    cr_assert_eq(sbx_cost_of_duration("e2b", 1, 1, NULL, NAN, &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL);
    cr_assert(strstr(sbx_error_get0_message(err), "seconds nan is not a finite number"), "%s",
              sbx_error_get0_message(err));
    sbx_error_clear(&err);
    cr_assert_eq(sbx_cost_of_duration("e2b", 1, 1, NULL, 1, NULL, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_cost_of_duration("nosuchcloud", 1, 1, NULL, 1, &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, NULL);
    sbx_error_clear(&err);
    /* A cost past what an amount holds is an error naming the seconds,
     * never 0 or a wrapped number: 1e12 s of e2b's 1 vCPU + 1 GiB is
     * 18,500,000 USD; 1e300 s does not fit even the microsecond count. */
    cr_assert_eq(sbx_cost_of_duration("e2b", 1, 1, NULL, 1e11, &v, &err), 0);
    assert_usd(v, "1850000");
    cr_assert_eq(sbx_cost_of_duration("e2b", 1, 1, NULL, 1e12, &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "1e+12 seconds", NULL);
    cr_assert_eq(v, 0);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_cost_of_duration("e2b", 1, 1, NULL, 1e300, &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "1e+300 seconds", NULL);
    sbx_error_clear(&err);
    /* At a rate of 0 any duration costs 0. */
    cr_assert_eq(sbx_cost_of_duration("docker", 1, 1, NULL, 1e300, &v, &err), 0);
    cr_assert_eq(v, 0);
}

/* Sets @path's modification time @secs seconds back. */
static void
age_file(const char *path, int secs)
{
    struct timespec ts[2];

    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= secs;
    ts[1] = ts[0];
    cr_assert_eq(utimensat(AT_FDCWD, path, ts, 0), 0, "%s: %s", path, strerror(errno));
}

/* A malformed rate is named: its key, its value and the file of its
 * entry, not only the backend. */
Test(pricing, a_malformed_rate_is_named_with_its_value_and_file)
{
    sbx_error *err = NULL;
    int64_t v = -1;
    char *path = tu_strdup_printf("%s/pricing.json", config_home);

    user_pricing("{\"backends\":{\"local\":{\"vcpu_usd_per_s\":\"abc\"}}}");
    cr_assert_eq(sbx_cost_per_second("local", 1, 1, NULL, &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION,
                    "backend \"local\" has a malformed rate in the pricing table: "
                    "vcpu_usd_per_s \"abc\" is not a decimal number of USD >= 0 that fits "
                    "(the entry last set by ", path, NULL);
    sbx_error_clear(&err);
    user_pricing("{\"backends\":{\"local\":{\"ram_gib_usd_per_h\":-0.5}}}");
    cr_assert_eq(sbx_cost_per_second("local", 1, 1, NULL, &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "ram_gib_usd_per_h -0.5 is not", NULL);
    sbx_error_clear(&err);
    /* A file that is not JSON: named, the parser's reason on the same line. */
    user_pricing("{bad json");
    cr_assert_eq(sbx_cost_per_second("local", 1, 1, NULL, &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "cannot read the pricing file ", path, ": ",
                    NULL);
    cr_assert_null(strchr(sbx_error_get0_message(err), '\n'), "a newline in \"%s\"",
                   sbx_error_get0_message(err));
    sbx_error_free(err);
    free(path);
}

/* The table is parsed once and kept while its files stay as they were
 * (pricing.c): every change of the user's file is still seen, whether it
 * is rewritten in place (same inode, same size), replaced by a rename, or
 * comes or goes. */
Test(pricing, a_changed_user_file_is_seen_at_the_next_call)
{
    char *path = tu_strdup_printf("%s/pricing.json", config_home);
    char *other = tu_strdup_printf("%s/other.json", config_home);

    user_pricing("{\"backends\":{\"local\":{\"vcpu_usd_per_h\":3.6,\"ram_gib_usd_per_h\":0}}}");
    age_file(path, 10);
    cr_assert_eq(fusd("local", 1, 0, NULL), INT64_C(1000000000000));
    cr_assert_eq(fusd("local", 1, 0, NULL), INT64_C(1000000000000));
    /* In place, the same size: a new modification time. */
    user_pricing("{\"backends\":{\"local\":{\"vcpu_usd_per_h\":7.2,\"ram_gib_usd_per_h\":0}}}");
    cr_assert_eq(fusd("local", 1, 0, NULL), INT64_C(2000000000000));
    /* In place, then given back an old time: the change time differs. */
    age_file(path, 10);
    cr_assert_eq(fusd("local", 1, 0, NULL), INT64_C(2000000000000));
    tu_write_file(path, "{\"backends\":{\"local\":{\"vcpu_usd_per_h\":1.8,\"ram_gib_usd_per_h\":0}}}",
                  strlen("{\"backends\":{\"local\":{\"vcpu_usd_per_h\":1.8,\"ram_gib_usd_per_h\":0}}}"),
                  0644);
    age_file(path, 10);
    cr_assert_eq(fusd("local", 1, 0, NULL), INT64_C(500000000000));
    /* Replaced by a rename, aged alike. */
    tu_write_file(other, "{\"backends\":{\"local\":{\"vcpu_usd_per_h\":0.36,\"ram_gib_usd_per_h\":0}}}",
                  strlen("{\"backends\":{\"local\":{\"vcpu_usd_per_h\":0.36,\"ram_gib_usd_per_h\":0}}}"),
                  0644);
    age_file(other, 10);
    cr_assert_eq(rename(other, path), 0);
    cr_assert_eq(fusd("local", 1, 0, NULL), INT64_C(100000000000));
    /* No user file any more: the bundled table (local is free there). */
    unsetenv("SBX_PRICING_FILE");
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(fusd("local", 1, 0, NULL), 0);
    free(other);
    free(path);
}

Test(pricing, a_user_file_overrides_and_extends_the_table)
{
    sbx_error *err = NULL;
    char *entry;
    int64_t v;

    user_pricing("{\"backends\":{\"local\":{\"vcpu_usd_per_h\":0.36},"
                 "\"mycloud\":{\"vcpu_usd_per_s\":0.001,\"ram_gib_usd_per_s\":0}}}");
    cr_assert_eq(fusd("local", 1, 16, NULL), INT64_C(100000000000));
    cr_assert_eq(fusd("mycloud", 2, 1, NULL), INT64_C(2000000000000));
    cr_assert_eq(fusd("e2b", 1, 1, NULL), INT64_C(18500000000));
    entry = sbx_pricing_get_entry("local", &err);
    cr_assert(strstr(entry, config_home), "%s", entry);
    cr_assert_null(strstr(entry, "vcpu_usd_per_s"), "%s", entry);
    free(entry);

    /* A file named that cannot be read is an error naming it. */
    setenv("SBX_PRICING_FILE", "/nonexistent/pricing.json", 1);
    cr_assert_eq(sbx_cost_per_second("local", 1, 1, NULL, &v, &err), -1);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "/nonexistent/pricing.json", NULL);
    sbx_error_free(err);
}

/* ------------------------------------------------------------ Claude Code */

TestSuite(claude, .init = agent_setup, .fini = agent_teardown, .timeout = 60);

/* CASE-41 F1: one result object. */
Test(claude, case41_f1_reads_total_cost_usd_and_every_token_count)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CLAUDE_CODE, "F1");
    sbx_usage u = usage_of(run);

    assert_succeeded(run, "done");
    assert_llm_cost(&u, "0.0731245");
    cr_assert_eq(u.llm_cost_pusd, INT64_C(73124500000));
    assert_tokens(&u, 12, 842, 0, 20480, 5120);
    cr_assert_eq(u.calls, 1);
    cr_assert_str_eq(sbx_agent_run_get0_session_id(run),
                     "00000000-0000-4000-8000-000000000001");
    cr_assert_eq(sbx_agent_run_get_exit_code(run), 0);
    sbx_agent_run_free(run);
}

/* CASE-41 F2: the verbose array, the result last. */
Test(claude, case41_f2_verbose_array)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CLAUDE_CODE, "F2");
    sbx_usage u = usage_of(run);

    assert_succeeded(run, "done");
    assert_llm_cost(&u, "0.0731245");
    assert_tokens(&u, 12, 842, 0, 20480, 5120);
    sbx_agent_run_free(run);
}

/* CASE-41 F3: no total_cost_usd (as under a subscription): unknown, not 0. */
Test(claude, case41_f3_a_missing_cost_is_unknown_never_zero)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CLAUDE_CODE, "F3");
    sbx_usage u = usage_of(run);
    char *json = sbx_agent_run_to_json(run);
    int64_t total;

    assert_succeeded(run, "done");
    cr_assert_eq(u.llm_cost_unknown, 1);
    cr_assert_eq(u.llm_cost_pusd, 0);
    assert_tokens(&u, 12, 842, 0, 20480, 5120);
    cr_assert(strstr(json, "\"llm_cost_usd\":null"), "%s", json);
    cr_assert(strstr(json, "\"total_cost_usd\":null"), "%s", json);
    cr_assert_eq(sbx_usage_total_cost(&u, &total), 0);
    free(json);
    sbx_agent_run_free(run);
}

/* CASE-41 F4: error_max_turns with an empty errors list, exit code 1. */
Test(claude, case41_f4_max_turns_fails_naming_it_and_keeps_its_cost)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CLAUDE_CODE, "F4");
    sbx_usage u = usage_of(run);

    assert_failed(run, "error_max_turns", SBX_ERROR_COMMAND_FAILED);
    assert_llm_cost(&u, "0.41");
    assert_tokens(&u, 900, 300, 0, 0, 0);
    cr_assert_eq(sbx_agent_run_get_exit_code(run), 1);
    sbx_agent_run_free(run);
}

/* CASE-56 G1: subtype success with is_error true, exit code 0. */
Test(claude, case56_g1_is_error_true_is_a_rate_limited_failure)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CLAUDE_CODE, "G1");
    sbx_usage u = usage_of(run);
    char *json = sbx_agent_run_to_json(run);

    assert_failed(run, "success with is_error true: API Error: Rate limit reached",
                  SBX_ERROR_RATE_LIMITED);
    assert_llm_cost(&u, "0");
    assert_tokens(&u, 0, 0, 0, 0, 0);
    cr_assert_eq(sbx_agent_run_get_exit_code(run), 0);
    cr_assert(strstr(json, "\"text\":null"), "%s", json);
    cr_assert(strstr(json, "\"llm_cost_usd\":0,"), "%s", json);
    cr_assert(strstr(json, "\"error_code\":\"rate_limited\""), "%s", json);
    free(json);
    sbx_agent_run_free(run);
}

/* CASE-56 G2: stream-json, an authentication error after 484 paid turns. */
Test(claude, case56_g2_authentication_failure_keeps_the_paid_turns)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CLAUDE_CODE, "G2");
    sbx_usage u = usage_of(run);

    assert_failed(run, "success with is_error true: Your organization has disabled Claude "
                       "subscription access for Claude Code", SBX_ERROR_AUTHENTICATION);
    assert_llm_cost(&u, "31.5");
    assert_tokens(&u, 1200, 3400, 0, 880000, 0);
    sbx_agent_run_free(run);
}

/* CASE-56 G3: an answer that reads like an error is still an answer. */
Test(claude, case56_g3_status_never_comes_from_the_text)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CLAUDE_CODE, "G3");
    sbx_usage u = usage_of(run);

    assert_succeeded(run, "API Error: Rate limit reached");
    assert_llm_cost(&u, "0.0123");
    sbx_agent_run_free(run);
}

/* CASE-56 G4: is_error false but the subtype is not success. */
Test(claude, case56_g4_a_subtype_other_than_success_fails)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CLAUDE_CODE, "G4");
    sbx_usage u = usage_of(run);

    assert_failed(run, "error_during_execution", SBX_ERROR_COMMAND_FAILED);
    assert_llm_cost(&u, "0.004");
    assert_tokens(&u, 40, 12, 0, 0, 0);
    sbx_agent_run_free(run);
}

/* stream-json cut short: records but no result. */
Test(claude, a_stream_without_its_result_fails_with_an_unknown_cost)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CLAUDE_CODE, "cut");
    sbx_usage u = usage_of(run);

    assert_failed(run, "no result record", SBX_ERROR_COMMAND_FAILED);
    cr_assert_eq(u.llm_cost_unknown, 1);
    cr_assert_str_eq(sbx_agent_run_get0_session_id(run),
                     "00000000-0000-4000-8000-000000000006");
    sbx_agent_run_free(run);
}

Test(claude, output_that_is_not_its_json_is_command_failed_with_the_output)
{
    sbx_error *err = run_fixture_fail(SBX_AGENT_CLAUDE_CODE, "garbage", NULL,
                                      SBX_ERROR_COMMAND_FAILED);

    cr_assert_str_eq(sbx_error_get0_context(err, "exit_code"), "1");
    cr_assert_str_eq(sbx_error_get0_context(err, "stdout"),
                     "Error: Invalid API key \xc2\xb7 Please run /login\n");
    cr_assert_str_eq(sbx_error_get0_op(err), "run_agent");
    cr_assert_str_eq(sbx_error_get0_backend(err), "local");
    sbx_error_free(err);

    err = run_fixture_fail(SBX_AGENT_CLAUDE_CODE, "crash", NULL, SBX_ERROR_COMMAND_FAILED);
    cr_assert_str_eq(sbx_error_get0_context(err, "stderr"),
                     "TypeError: cannot read properties of undefined\n");
    cr_assert_str_eq(sbx_error_get0_context(err, "stdout"), "");
    sbx_error_free(err);
}

Test(claude, a_missing_cli_is_command_failed_naming_it)
{
    sbx_error *err = run_fixture_fail(SBX_AGENT_CLAUDE_CODE, "F1", "claude-not-installed",
                                      SBX_ERROR_COMMAND_FAILED);

    tu_assert_error(err, SBX_ERROR_COMMAND_FAILED, "claude-not-installed", "not found", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "exit_code"), "127");
    sbx_error_free(err);
}

Test(claude, bad_requests_are_invalid_argument)
{
    sbx_agent_request req = SBX_AGENT_REQUEST_INIT;
    sbx_error *err = NULL;

    cr_assert_null(sbx_sandbox_run_agent(sandbox, &req, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "prompt", NULL);
    sbx_error_clear(&err);
    req.prompt = "x";
    req.harness = 9;
    cr_assert_null(sbx_sandbox_run_agent(sandbox, &req, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "harness 9", NULL);
    sbx_error_clear(&err);
    cr_assert_null(sbx_sandbox_run_agent(NULL, &req, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "sandbox", NULL);
    sbx_error_clear(&err);
    /* A struct_size that does not reach the prompt is named, not taken
     * for a missing prompt. */
    req.harness = SBX_AGENT_CLAUDE_CODE;
    req.struct_size = 3;
    cr_assert_null(sbx_sandbox_run_agent(sandbox, &req, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "request struct_size is 3, needs at least",
                    "SBX_AGENT_REQUEST_INIT", NULL);
    sbx_error_free(err);
}

/* Reads the argument log of the stand-in into one line per argument. */
static char *
argv_of(sbx_agent_harness harness, const char *prompt, const char *model, const char *resume,
        const char *const *extra)
{
    char *dir = tu_mkdtemp("sbx-agent-argv-");
    char *log = tu_strdup_printf("%s/argv", dir);
    char *log_env = tu_strdup_printf("SBX_AGENT_ARGV_LOG=%s", log);
    const char *env[] = { path_env, log_env, NULL };
    sbx_agent_request req = SBX_AGENT_REQUEST_INIT;
    sbx_agent_run *run;
    char buf[4096];
    size_t n;
    FILE *f;

    req.harness = harness;
    req.prompt = prompt;
    req.model = model;
    req.resume = resume;
    req.extra_args = extra;
    req.env = env;
    /* A prompt without a fixture fails the call (the stand-in exits 2);
     * its arguments are logged all the same. */
    run = sbx_sandbox_run_agent(sandbox, &req, NULL);
    sbx_agent_run_free(run);
    f = fopen(log, "r");
    cr_assert_not_null(f, "the stand-in wrote no argument log");
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    tu_rmtree(dir);
    free(dir);
    free(log);
    free(log_env);
    return strdup(buf);
}

Test(claude, each_cli_gets_its_documented_command_line)
{
    const char *extra[] = { "--max-turns", "3", NULL };
    char *a;

    a = argv_of(SBX_AGENT_CLAUDE_CODE, "F1", "claude-sonnet-4-5", "sess-1", extra);
    cr_assert_str_eq(a, "claude\n-p\n--output-format\njson\n--model\nclaude-sonnet-4-5\n"
                        "--resume\nsess-1\n--max-turns\n3\n--\nF1\n");
    free(a);
    a = argv_of(SBX_AGENT_CLAUDE_CODE, "F1", NULL, "", NULL);
    cr_assert_str_eq(a, "claude\n-p\n--output-format\njson\n-c\n--\nF1\n");
    free(a);
    a = argv_of(SBX_AGENT_CODEX, "C1", "gpt-5-codex", "", NULL);
    cr_assert_str_eq(a, "codex\nexec\n--json\n--model\ngpt-5-codex\nresume\n--last\n--\nC1\n");
    free(a);
    a = argv_of(SBX_AGENT_CODEX, "C1", NULL, "0199a213-81c0-7800-8aa1-bbab2a035a53", NULL);
    cr_assert_str_eq(a, "codex\nexec\n--json\nresume\n0199a213-81c0-7800-8aa1-bbab2a035a53\n"
                        "--\nC1\n");
    free(a);
    a = argv_of(SBX_AGENT_OPENCODE, "F5", "anthropic/claude-sonnet-4-5", NULL, extra);
    cr_assert_str_eq(a, "opencode\nrun\n--format\njson\n--model\nanthropic/claude-sonnet-4-5\n"
                        "--max-turns\n3\n--\nF5\n");
    free(a);
    a = argv_of(SBX_AGENT_OPENCODE, "F5", NULL, "ses_1", NULL);
    cr_assert_str_eq(a, "opencode\nrun\n--format\njson\n--session\nses_1\n--\nF5\n");
    free(a);
    /* A prompt that looks like an option is still the prompt: last, after
     * "--" (claude took "--version" for its own flag). */
    a = argv_of(SBX_AGENT_CLAUDE_CODE, "--version", NULL, NULL, NULL);
    cr_assert_str_eq(a, "claude\n-p\n--output-format\njson\n--\n--version\n");
    free(a);
    a = argv_of(SBX_AGENT_CODEX, "-", NULL, NULL, NULL);
    cr_assert_str_eq(a, "codex\nexec\n--json\n--\n-\n");
    free(a);
}

/* CASE-48: the agent's key reaches the sandbox only when the call passes it. */
Test(claude, case48_credentials_reach_the_agent_only_when_passed)
{
    const char *with_key[] = { path_env, "ANTHROPIC_API_KEY=sk-ant-TESTSECRET-0000", NULL };
    sbx_agent_request req = SBX_AGENT_REQUEST_INIT;
    sbx_agent_run *run;

    setenv("E2B_API_KEY", "e2b_TESTSECRET_0123456789abcdef", 1);
    setenv("ANTHROPIC_API_KEY", "sk-ant-TESTSECRET-0000", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "TESTSECRETaws0000", 1);
    setenv("BESPOKE_CONTROL_PLANE_ADMIN_TOKEN", "TESTSECRETadmin0000", 1);
    setenv("SSH_AUTH_SOCK", "/tmp/TESTSECRET-agent.sock", 1);
    /* A sandbox made after the canaries are in this process's environment. */
    sbx_sandbox_destroy(sandbox, NULL);
    sbx_sandbox_free(sandbox);
    sandbox = tu_create(client, NULL);

    run = run_fixture(SBX_AGENT_CLAUDE_CODE, "env");
    assert_succeeded(run, "keys=[] secrets=0");
    sbx_agent_run_free(run);

    req.prompt = "env";
    req.env = with_key;
    run = sbx_sandbox_run_agent(sandbox, &req, NULL);
    cr_assert_not_null(run);
    assert_succeeded(run, "keys=[ANTHROPIC_API_KEY ] secrets=1");
    sbx_agent_run_free(run);
}

/* ------------------------------------------------------------ Codex */

TestSuite(codex, .init = agent_setup, .fini = agent_teardown, .timeout = 60);

Test(codex, a_completed_turn_succeeds_and_cached_input_is_counted_once)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CODEX, "C1");
    sbx_usage u = usage_of(run);

    assert_succeeded(run, "The repository has a README.");
    /* input_tokens 24763 include the 24448 cached ones. */
    assert_tokens(&u, 315, 122, 0, 24448, 0);
    cr_assert_eq(u.llm_cost_unknown, 1, "Codex reports no cost");
    cr_assert_str_eq(sbx_agent_run_get0_session_id(run),
                     "0199a213-81c0-7800-8aa1-bbab2a035a53");
    sbx_agent_run_free(run);
}

Test(codex, turn_failed_fails_naming_the_error)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CODEX, "C2");

    assert_failed(run, "turn.failed: stream error: unexpected status 401 Unauthorized",
                  SBX_ERROR_COMMAND_FAILED);
    cr_assert_eq(sbx_agent_run_get_exit_code(run), 1);
    sbx_agent_run_free(run);
}

Test(codex, a_stream_cut_before_its_terminal_event_fails_even_with_exit_0)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CODEX, "C3");

    assert_failed(run, "no terminal event", SBX_ERROR_COMMAND_FAILED);
    cr_assert_eq(sbx_agent_run_get_exit_code(run), 0);
    sbx_agent_run_free(run);
}

Test(codex, turns_are_summed_and_reasoning_is_taken_out_of_output)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CODEX, "C4");
    sbx_usage u = usage_of(run);

    assert_succeeded(run, "Second");
    assert_tokens(&u, 1500, 150, 200, 1500, 0);
    cr_assert_eq(sbx_usage_total_tokens(&u), 3350);
    sbx_agent_run_free(run);
}

/* ------------------------------------------------------------ OpenCode */

TestSuite(opencode, .init = agent_setup, .fini = agent_teardown, .timeout = 60);

/* CASE-41 F5: step_finish records summed in decimal. */
Test(opencode, case41_f5_costs_are_summed_exactly)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_OPENCODE, "F5");
    sbx_usage u = usage_of(run);
    char *json = sbx_agent_run_to_json(run);

    assert_succeeded(run, "PONG");
    assert_llm_cost(&u, "0.011117");
    cr_assert_eq(u.llm_cost_pusd, INT64_C(11117000000));
    assert_tokens(&u, 23088, 197, 31, 10880, 256);
    cr_assert(strstr(json, "\"llm_cost_usd\":0.011117,"), "%s", json);
    cr_assert_str_eq(sbx_agent_run_get0_session_id(run), "ses_6f1a2b3c4d5e");
    free(json);
    sbx_agent_run_free(run);
}

Test(opencode, an_error_event_fails_with_its_kind)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_OPENCODE, "O2");

    assert_failed(run, "error: ProviderAuthError: invalid x-api-key", SBX_ERROR_AUTHENTICATION);
    sbx_agent_run_free(run);
}

Test(opencode, a_step_left_open_fails_and_keeps_the_paid_steps)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_OPENCODE, "O3");
    sbx_usage u = usage_of(run);

    assert_failed(run, "no step_finish after the last step_start", SBX_ERROR_COMMAND_FAILED);
    assert_llm_cost(&u, "0.001");
    assert_tokens(&u, 100, 10, 0, 0, 0);
    sbx_agent_run_free(run);
}

Test(opencode, a_repeated_step_finish_counts_once_and_no_cost_is_unknown)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_OPENCODE, "O4");
    sbx_usage u = usage_of(run);

    assert_succeeded(run, "Done: 3 files");
    assert_tokens(&u, 1200, 60, 5, 400, 0);
    cr_assert_eq(u.llm_cost_unknown, 1);
    sbx_agent_run_free(run);
}

/* Token counts that are not JSON integers >= 0 count 0, a negative cost
 * is no cost, and neither can drive a total below 0. */
Test(claude, malformed_token_counts_and_a_negative_cost_are_not_counted)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CLAUDE_CODE, "U1");
    sbx_usage u = usage_of(run);
    char *json = sbx_agent_run_to_json(run);

    assert_succeeded(run, "done");
    assert_tokens(&u, 0, 7, 0, 0, 0);
    cr_assert_eq(u.llm_cost_unknown, 1);
    cr_assert_eq(u.llm_cost_pusd, 0);
    cr_assert(strstr(json, "\"llm_cost_usd\":null"), "%s", json);
    free(json);
    sbx_agent_run_free(run);
}

/* An answer with bytes that are not UTF-8 (a lone 0xFF, a surrogate, an
 * overlong '/') keeps them in the getter, and the JSON forms hold U+FFFD
 * for each such byte, so they stay JSON. */
#define FFFD "\xEF\xBF\xBD"
Test(claude, text_that_is_not_utf8_is_replaced_in_the_json_only)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_CLAUDE_CODE, "U3");
    char *json = sbx_agent_run_to_json(run);
    json_tokener *tok = json_tokener_new();
    json_object *doc;

    assert_succeeded(run, "caf\xC3\xA9 \xFF\xFE \xED\xA0\x80 \xC0\xAF ok");
    cr_assert(strstr(json, "\"text\":\"caf\xC3\xA9 " FFFD FFFD " " FFFD FFFD FFFD " " FFFD FFFD
                           " ok\","), "%s", json);
    cr_assert(strstr(json, "\"session_id\":\"00000000-0000-4000-8000-0000000000" FFFD "1\""),
              "%s", json);
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    doc = json_tokener_parse_ex(tok, json, (int)strlen(json));
    cr_assert_not_null(doc, "not valid UTF-8 JSON: %s", json);
    json_object_put(doc);
    json_tokener_free(tok);
    free(json);
    sbx_agent_run_free(run);
}

/* Counts past INT64_MAX stop there instead of wrapping negative, and a sum
 * of costs past what an amount holds is unknown, not a wrapped number;
 * the sandbox's running total stays at the bound after a later call. */
Test(opencode, huge_counts_stop_at_the_bound_and_an_overflowing_cost_is_unknown)
{
    sbx_agent_run *run = run_fixture(SBX_AGENT_OPENCODE, "U2");
    sbx_usage u = usage_of(run), s = SBX_USAGE_INIT;
    char *json = sbx_agent_run_to_json(run);

    assert_succeeded(run, "big");
    assert_tokens(&u, INT64_MAX, 1005, 2, 4, 3);
    cr_assert_eq(sbx_usage_total_tokens(&u), INT64_MAX);
    cr_assert_eq(u.llm_cost_unknown, 1);
    cr_assert_eq(u.llm_cost_pusd, 0);
    cr_assert(strstr(json, "\"llm_cost_usd\":null"), "%s", json);
    cr_assert(strstr(json, "\"total_tokens\":9223372036854775807,"), "%s", json);
    free(json);
    sbx_agent_run_free(run);

    sbx_agent_run_free(run_fixture(SBX_AGENT_CLAUDE_CODE, "F1"));
    cr_assert_eq(sbx_sandbox_get_usage(sandbox, &s, NULL), 0);
    cr_assert_eq(s.calls, 2);
    assert_tokens(&s, INT64_MAX, 1005 + 842, 2, 4 + 20480, 3 + 5120);
    cr_assert_eq(sbx_usage_total_tokens(&s), INT64_MAX);
    cr_assert_eq(s.llm_cost_unknown, 1);
    assert_usd(s.llm_cost_pusd, "0.0731245");
}

/* ------------------------------------------------------------ usage, ledger */

TestSuite(usage, .init = agent_setup, .fini = agent_teardown, .timeout = 60);

/* Reads the ledger's lines. */
static size_t
ledger_lines(const char *path, char lines[][2048], size_t max)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;

    cr_assert_not_null(f, "no ledger at %s", path);
    while (n < max && fgets(lines[n], 2048, f))
        n++;
    fclose(f);
    return n;
}

Test(usage, sandbox_and_client_totals_and_the_ledger)
{
    char *ledger = tu_strdup_printf("%s/ledger.jsonl", config_home);
    sbx_usage s = SBX_USAGE_INIT, c = SBX_USAGE_INIT;
    char lines[8][2048];
    sbx_agent_run *run;
    sbx_error *err = NULL;
    int64_t total;
    json_object *rec;
    size_t n;

    /* Billed by the hour: any run shorter than an hour costs exactly one
     * hour, so the compute costs are exact whatever the machine's speed. */
    user_pricing("{\"backends\":{\"local\":{\"vcpu_usd_per_h\":0.36,\"ram_gib_usd_per_h\":0,"
                 "\"billing_granularity_s\":3600,\"source_url\":\"https://example.com/rates\"}}}");
    cr_assert_eq(sbx_client_set_ledger(client, ledger, &err), 0);
    sbx_agent_run_free(run_fixture(SBX_AGENT_CLAUDE_CODE, "F1"));
    sbx_agent_run_free(run_fixture(SBX_AGENT_OPENCODE, "F5"));
    run = run_fixture(SBX_AGENT_CLAUDE_CODE, "F3");
    {
        sbx_usage u = usage_of(run);

        assert_usd(u.compute_cost_pusd, "0.36");
        cr_assert_eq(u.compute_cost_unknown, 0);
    }
    sbx_agent_run_free(run);

    cr_assert_eq(sbx_sandbox_get_usage(sandbox, &s, &err), 0);
    cr_assert_eq(s.calls, 3);
    assert_tokens(&s, 12 + 23088 + 12, 842 + 197 + 842, 31, 20480 + 10880 + 20480,
                  5120 + 256 + 5120);
    assert_usd(s.llm_cost_pusd, "0.0842415");
    cr_assert_eq(s.llm_cost_unknown, 1);
    assert_usd(s.compute_cost_pusd, "1.08");
    cr_assert_eq(s.sandboxes, 1);
    assert_usd(s.sandbox_cost_pusd, "0.36");
    cr_assert_eq(sbx_usage_total_cost(&s, &total), 0, "one cost is unknown");
    assert_usd(total, "0.4442415");

    cr_assert_eq(sbx_sandbox_destroy(sandbox, &err), 0);
    cr_assert_eq(sbx_client_get_usage(client, &c, &err), 0);
    cr_assert_eq(c.calls, 3);
    cr_assert_eq(c.sandboxes, 1);
    assert_usd(c.sandbox_cost_pusd, "0.36");
    assert_usd(c.llm_cost_pusd, "0.0842415");

    n = ledger_lines(ledger, lines, 8);
    cr_assert_eq(n, 4, "%zu ledger lines", n);
    cr_assert(strstr(lines[0], "\"kind\":\"agent_call\""), "%s", lines[0]);
    cr_assert(strstr(lines[0], "\"llm_cost_usd\":0.0731245,"), "%s", lines[0]);
    cr_assert(strstr(lines[0], "\"compute_cost_usd\":0.36"), "%s", lines[0]);
    cr_assert(strstr(lines[0], "\"rate_usd_per_s\":0.0001,"), "%s", lines[0]);
    cr_assert(strstr(lines[0], "\"rate_source\":\"https://example.com/rates\""), "%s",
              lines[0]);
    cr_assert(strstr(lines[1], "\"llm_cost_usd\":0.011117,"), "%s", lines[1]);
    cr_assert(strstr(lines[1], "\"harness\":\"opencode\""), "%s", lines[1]);
    cr_assert(strstr(lines[2], "\"llm_cost_usd\":null"), "%s", lines[2]);
    rec = json_tokener_parse(lines[3]);
    cr_assert_not_null(rec, "%s", lines[3]);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(rec, "kind")), "sandbox");
    cr_assert_str_eq(json_object_get_string(json_object_object_get(rec, "end")), "destroyed");
    cr_assert_str_eq(json_object_get_string(json_object_object_get(rec, "backend")), "local");
    cr_assert_str_eq(json_object_get_string(json_object_object_get(rec, "sandbox_id")),
                     sbx_sandbox_get0_id(sandbox));
    cr_assert_eq(json_object_get_int(json_object_object_get(rec, "agent_calls")), 3);
    cr_assert_eq(json_object_get_int(json_object_object_get(rec, "llm_cost_unknown_calls")), 1);
    cr_assert(strstr(lines[3], "\"llm_cost_usd\":0.0842415,"), "%s", lines[3]);
    cr_assert(strstr(lines[3], "\"compute_cost_usd\":0.36"), "%s", lines[3]);
    cr_assert(strstr(lines[3], "\"billed_seconds\":3600,"), "%s", lines[3]);
    json_object_put(rec);
    free(ledger);
}

/* A resumed sandbox is priced at the size it was created with, which its
 * session state carries (an hour at least, so the cost is exact). */
Test(usage, a_resumed_sandbox_is_priced_at_its_own_size)
{
    static const char def[] = "\"size\":{\"cpu\":1,\"memory_mb\":1024},";
    static const char big[] = "\"size\":{\"cpu\":2,\"memory_mb\":3072},";
    sbx_sandbox *again;
    sbx_usage u = SBX_USAGE_INIT;
    sbx_error *err = NULL;
    char *state, *at, *edited;

    user_pricing("{\"backends\":{\"local\":{\"vcpu_usd_per_h\":0.36,\"ram_gib_usd_per_h\":0.1,"
                 "\"billing_granularity_s\":3600,\"minimum_s\":3600}}}");
    state = sbx_sandbox_session_state(sandbox, &err);
    cr_assert_not_null(state, "%s", err ? sbx_error_get0_message(err) : "");
    at = strstr(state, def);
    cr_assert_not_null(at, "%s", state);
    /* The same sandbox as if it had been made with 2 vCPUs and 3 GiB (local
     * cannot enforce a size, so the state is edited to say so). */
    edited = tu_strdup_printf("%.*s%s%s", (int)(at - state), state, big, at + strlen(def));
    again = sbx_sandbox_resume(client, edited, &err);
    cr_assert_not_null(again, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_get_usage(again, &u, &err), 0);
    /* One hour of 2 × 0.36 + 3 × 0.1. */
    assert_usd(u.sandbox_cost_pusd, "1.02");
    sbx_sandbox_free(again);
    free(edited);
    free(state);

    /* A size that is not one is named. */
    again = sbx_sandbox_resume(client, "{\"version\":1,\"backend\":\"local\",\"id\":\"x\","
                               "\"timeout_secs\":60,\"size\":{\"cpu\":0,\"memory_mb\":1},"
                               "\"data\":{}}", &err);
    cr_assert_null(again);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL);
    cr_assert(strstr(sbx_error_get0_message(err), "\"size.cpu\" must be a positive number (got 0)"),
              "%s", sbx_error_get0_message(err));
    sbx_error_clear(&err);
}

Test(usage, a_backend_without_a_price_has_an_unknown_compute_cost)
{
    sbx_agent_run *run;
    sbx_usage u;

    /* local's entry replaced by one without published rates. */
    user_pricing("{\"backends\":{\"local\":{\"vcpu_usd_per_s\":null}}}");
    run = run_fixture(SBX_AGENT_CLAUDE_CODE, "F1");
    u = usage_of(run);
    cr_assert_eq(u.compute_cost_unknown, 1);
    cr_assert_eq(u.compute_cost_pusd, 0);
    assert_llm_cost(&u, "0.0731245");
    sbx_agent_run_free(run);
}

Test(usage, the_ledger_comes_from_SBX_LEDGER_and_a_bad_path_is_named)
{
    char *ledger = tu_strdup_printf("%s/from-env.jsonl", config_home);
    char lines[4][2048];
    sbx_client *c2;
    sbx_sandbox *sb;
    sbx_error *err = NULL;

    setenv("SBX_LEDGER", ledger, 1);
    c2 = sbx_client_new("local", &err);
    cr_assert_not_null(c2);
    sb = tu_create(c2, NULL);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    cr_assert_eq(ledger_lines(ledger, lines, 4), 1);
    cr_assert(strstr(lines[0], "\"kind\":\"sandbox\""), "%s", lines[0]);
    cr_assert(strstr(lines[0], "\"agent_calls\":0,"), "%s", lines[0]);
    cr_assert(strstr(lines[0], "\"compute_cost_usd\":0,"), "%s", lines[0]);

    cr_assert_eq(sbx_client_set_ledger(c2, "/nonexistent/dir/ledger.jsonl", &err), -1);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "/nonexistent/dir/ledger.jsonl", NULL);
    sbx_error_clear(&err);
    sbx_client_free(c2);

    /* SBX_LEDGER naming a file that cannot be opened fails the client at
     * once (its records were dropped without a word). */
    setenv("SBX_LEDGER", "/nonexistent/dir/ledger.jsonl", 1);
    cr_assert_null(sbx_client_new("local", &err));
    tu_assert_error(err, SBX_ERROR_CONFIGURATION,
                    "cannot open the ledger SBX_LEDGER names, /nonexistent/dir/ledger.jsonl: "
                    "No such file or directory", NULL);
    cr_assert_str_eq(sbx_error_get0_backend(err), "local");
    sbx_error_free(err);
    unsetenv("SBX_LEDGER");
    free(ledger);
}

/* ------------------------------------------------------------ structured output */

static char *
extract_text(const char *text)
{
    sbx_error *err = NULL;
    json_object *v = sbx_json_extract(text, strlen(text), &err);
    char *s;

    cr_assert_not_null(v, "no JSON found in \"%s\": %s", text,
                       err ? sbx_error_get0_message(err) : "");
    s = strdup(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    json_object_put(v);
    return s;
}

static void
assert_extracts(const char *text, const char *want)
{
    char *got = extract_text(text);

    cr_assert_str_eq(got, want, "from \"%s\"", text);
    free(got);
}

Test(json, the_whole_text_then_a_fence_then_the_first_object)
{
    assert_extracts("  {\"a\": 1}\n", "{\"a\":1}");
    assert_extracts("[1, 2]", "[1,2]");
    assert_extracts("Here you go:\n```json\n{\"stars\": 42, \"ok\": true}\n```\nBye.",
                    "{\"stars\":42,\"ok\":true}");
    /* A fence that does not parse is passed over for the next one. */
    assert_extracts("```\nnot json\n```\ntext\n```JSON\n[\"x\"]\n```", "[\"x\"]");
    /* Braces inside strings do not end an object; a bad one is skipped. */
    assert_extracts("Result: {not json} then {\"s\": \"a } b {\", \"n\": {\"m\": 2}} done",
                    "{\"s\":\"a } b {\",\"n\":{\"m\":2}}");
}

Test(json, text_without_json_is_an_error_naming_it)
{
    sbx_error *err = NULL;

    cr_assert_null(sbx_json_extract("The answer is 42.", 17, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "17 bytes", "The answer is 42.", NULL);
    sbx_error_clear(&err);
    /* A scalar is not a structured answer. */
    cr_assert_null(sbx_json_extract("42", 2, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL);
    sbx_error_clear(&err);
    cr_assert_null(sbx_json_extract(NULL, 0, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL);
    sbx_error_free(err);
}

TestSuite(json_result, .init = agent_setup, .fini = agent_teardown, .timeout = 60);

Test(json_result, a_command_result_gives_its_json_or_command_failed)
{
    sbx_result *r = tu_sh(sandbox, "echo 'thinking...'; printf '```json\\n{\"n\": 3}\\n```\\n'",
                          0);
    sbx_error *err = NULL;
    json_object *v = sbx_result_get_json(r, &err);

    cr_assert_not_null(v, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(json_object_get_int(json_object_object_get(v, "n")), 3);
    json_object_put(v);
    sbx_result_free(r);

    r = tu_sh(sandbox, "echo '{\"n\": 3}'; echo oops >&2; exit 4", 0);
    cr_assert_null(sbx_result_get_json(r, &err));
    tu_assert_error(err, SBX_ERROR_COMMAND_FAILED, "exit", "4", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "stderr"), "oops\n");
    cr_assert_str_eq(sbx_error_get0_context(err, "stdout"), "{\"n\": 3}\n");
    sbx_error_clear(&err);
    sbx_result_free(r);

    r = tu_sh(sandbox, "echo no json here", 0);
    cr_assert_null(sbx_result_get_json(r, &err));
    tu_assert_error(err, SBX_ERROR_COMMAND_FAILED, "no JSON", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "exit_code"), "0");
    sbx_error_free(err);
    sbx_result_free(r);
}

/* ------------------------------------------------------------ apply_patch */

TestSuite(patch, .init = agent_setup, .fini = agent_teardown, .timeout = 60);

static void
put(const char *path, const char *text)
{
    sbx_error *err = NULL;

    cr_assert_eq(sbx_sandbox_write_file(sandbox, path, text, strlen(text), &err), 0, "%s: %s",
                 path, err ? sbx_error_get0_message(err) : "");
}

static void
assert_file(const char *path, const char *want)
{
    sbx_error *err = NULL;
    char *data = NULL;
    size_t len = 0;

    cr_assert_eq(sbx_sandbox_read_file(sandbox, path, &data, &len, &err), 0, "%s: %s", path,
                 err ? sbx_error_get0_message(err) : "");
    tu_assert_bytes(path, data, len, want, strlen(want));
    free(data);
}

static int
file_exists(const char *path)
{
    char *data = NULL;
    size_t len;
    int ok = sbx_sandbox_read_file(sandbox, path, &data, &len, NULL) == 0;

    free(data);
    return ok;
}

static const char multi_patch[] =
    "diff --git a/a.txt b/a.txt\n"
    "index 1111111..2222222 100644\n"
    "--- a/a.txt\n"
    "+++ b/a.txt\n"
    "@@ -1,3 +1,3 @@\n"
    " one\n"
    "-two\n"
    "+TWO\n"
    " three\n"
    "@@ -7,3 +7,4 @@\n"
    " seven\n"
    " eight\n"
    "+eight and a half\n"
    " nine\n"
    "--- a/run.sh\n"
    "+++ b/run.sh\n"
    "@@ -1,2 +1,2 @@\n"
    " #!/bin/sh\n"
    "-echo old\n"
    "+echo new\n"
    "--- /dev/null\n"
    "+++ b/new/b.txt\n"
    "@@ -0,0 +1,2 @@\n"
    "+hello\n"
    "+world\n"
    "\\ No newline at end of file\n"
    "--- a/gone.txt\n"
    "+++ /dev/null\n"
    "@@ -1 +0,0 @@\n"
    "-bye\n";

Test(patch, a_unified_diff_changes_creates_and_removes_files)
{
    sbx_error *err = NULL;
    sbx_result *r;

    /* Two lines more at the top than the patch expects: the second hunk
     * is found two lines down. */
    put("/w/a.txt", "zero\nhalf\none\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n");
    put("/w/run.sh", "#!/bin/sh\necho old\n");
    put("/w/gone.txt", "bye\n");
    r = tu_sh(sandbox, "chmod 755 \"$SANDBOX_ROOT/w/run.sh\"", 0);
    sbx_result_free(r);

    cr_assert_eq(sbx_sandbox_apply_patch(sandbox, multi_patch, strlen(multi_patch), 1, "/w",
                                         &err), 4, "%s", err ? sbx_error_get0_message(err) : "");
    assert_file("/w/a.txt", "zero\nhalf\none\nTWO\nthree\nfour\nfive\nsix\nseven\neight\n"
                            "eight and a half\nnine\nten\n");
    assert_file("/w/run.sh", "#!/bin/sh\necho new\n");
    assert_file("/w/new/b.txt", "hello\nworld");
    cr_assert_not(file_exists("/w/gone.txt"), "gone.txt is still there");
    r = tu_sh(sandbox, "stat -c %a \"$SANDBOX_ROOT/w/run.sh\"", 0);
    tu_assert_stdout(r, "755\n");
    sbx_result_free(r);
}

Test(patch, a_hunk_that_does_not_apply_changes_no_file_and_is_named)
{
    static const char p[] =
        "--- x.txt\n"
        "+++ x.txt\n"
        "@@ -1,2 +1,2 @@\n"
        "-alpha\n"
        "+ALPHA\n"
        " beta\n"
        "--- y.txt\n"
        "+++ y.txt\n"
        "@@ -1,1 +1,1 @@\n"
        "-first\n"
        "+FIRST\n"
        "@@ -3,2 +3,2 @@\n"
        " third\n"
        "-fourth\n"
        "+FOURTH\n";
    sbx_error *err = NULL;

    put("/w/x.txt", "alpha\nbeta\n");
    put("/w/y.txt", "first\nsecond\nthird\n4th\n");
    cr_assert_eq(sbx_sandbox_apply_patch(sandbox, p, strlen(p), 0, "/w", &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT,
                    "hunk 2 of y.txt (@@ -3,2 +3,2 @@) does not apply", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "hunk"), "2");
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), "/w/y.txt");
    cr_assert_str_eq(sbx_error_get0_op(err), "apply_patch");
    sbx_error_free(err);
    /* x.txt's hunk matched, but nothing was written. */
    assert_file("/w/x.txt", "alpha\nbeta\n");
    assert_file("/w/y.txt", "first\nsecond\nthird\n4th\n");
}

Test(patch, malformed_patches_and_missing_files_are_named)
{
    static const char no_diff[] = "just some text\n";
    static const char bad_header[] = "--- a\n+++ a\n@@ -x +1 @@\n";
    static const char short_strip[] = "--- a.txt\n+++ a.txt\n@@ -1 +1 @@\n-a\n+b\n";
    static const char missing[] = "--- nothere.txt\n+++ nothere.txt\n@@ -1 +1 @@\n-a\n+b\n";
    static const char exists[] = "--- /dev/null\n+++ x.txt\n@@ -0,0 +1 @@\n+a\n";
    sbx_error *err = NULL;

    cr_assert_eq(sbx_sandbox_apply_patch(sandbox, no_diff, strlen(no_diff), 0, "/w", &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "no unified diff", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_sandbox_apply_patch(sandbox, bad_header, strlen(bad_header), 0, "/w", &err),
                 -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "line 3", "@@ -x +1 @@", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_sandbox_apply_patch(sandbox, short_strip, strlen(short_strip), 1, "/w",
                                         &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "fewer than 1", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_sandbox_apply_patch(sandbox, missing, strlen(missing), 0, "/w", &err), -1);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "/w/nothere.txt", NULL);
    sbx_error_clear(&err);
    put("/w/x.txt", "a\n");
    cr_assert_eq(sbx_sandbox_apply_patch(sandbox, exists, strlen(exists), 0, "/w", &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "exists already", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_sandbox_apply_patch(sandbox, exists, strlen(exists), -1, "/w", &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "strip level -1", NULL);
    sbx_error_free(err);
}

/* ------------------------------------------------------------ agent specs */

TestSuite(specs, .init = agent_setup, .fini = agent_teardown, .timeout = 60);

Test(specs, a_context_allows_only_the_capabilities_granted)
{
    static const char p[] = "--- n.txt\n+++ n.txt\n@@ -1 +1 @@\n-a\n+b\n";
    sbx_agent_context *ctx;
    sbx_error *err = NULL;
    sbx_result *r;
    char *data = NULL;
    size_t len;

    cr_assert_null(sbx_sandbox_agent_tools(sandbox, 1u << 9, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "0x200", NULL);
    sbx_error_clear(&err);

    ctx = sbx_sandbox_agent_tools(sandbox, SBX_AGENT_CAP_SHELL, &err);
    cr_assert_not_null(ctx);
    cr_assert_eq(sbx_agent_context_get_capabilities(ctx), SBX_AGENT_CAP_SHELL);
    r = sbx_agent_context_shell(ctx, "echo hi", 0, &err);
    cr_assert_not_null(r);
    tu_assert_stdout(r, "hi\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_agent_context_write_file(ctx, "/n.txt", "a\n", 2, &err), -1);
    tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "\"files\" capability", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "capability"), "files");
    sbx_error_clear(&err);
    cr_assert_not(file_exists("/n.txt"), "a refused write wrote");
    cr_assert_eq(sbx_agent_context_read_file(ctx, "/x", &data, &len, &err), -1);
    tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "read_file", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_agent_context_apply_patch(ctx, p, strlen(p), 0, "/", &err), -1);
    tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "\"patch\" capability", NULL);
    sbx_error_clear(&err);
    sbx_agent_context_free(ctx);

    ctx = sbx_sandbox_agent_tools(sandbox, SBX_AGENT_CAP_FILES | SBX_AGENT_CAP_PATCH, &err);
    cr_assert_not_null(ctx);
    cr_assert_eq(sbx_agent_context_write_file(ctx, "/n.txt", "a\n", 2, &err), 0);
    cr_assert_eq(sbx_agent_context_apply_patch(ctx, p, strlen(p), 0, "/", &err), 1);
    cr_assert_eq(sbx_agent_context_read_file(ctx, "/n.txt", &data, &len, &err), 0);
    tu_assert_bytes("n.txt", data, len, "b\n", 2);
    free(data);
    cr_assert_null(sbx_agent_context_shell(ctx, "echo hi", 0, &err));
    tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "\"shell\" capability", NULL);
    sbx_error_free(err);
    sbx_agent_context_free(ctx);
    cr_assert_str_eq(sbx_agent_capability_name(SBX_AGENT_CAP_PORTS), "ports");
    cr_assert_null(sbx_agent_capability_name(3));
}

/* The "ports" capability: without it no port call runs (nothing exposed);
 * with it the agent exposes, lists, resolves and unexposes a port. */
Test(specs, port_calls_need_the_ports_capability)
{
    sbx_agent_context *ctx;
    sbx_error *err = NULL;
    uint16_t *ports = (uint16_t *)&err;
    size_t n = 9;
    char *ep;

    ctx = sbx_sandbox_agent_tools(sandbox, SBX_AGENT_CAP_DEFAULT | SBX_AGENT_CAP_PATCH, &err);
    cr_assert_not_null(ctx);
    cr_assert_eq(sbx_agent_context_expose_port(ctx, 40123, &err), -1);
    tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED,
                    "the agent was not granted the \"ports\" capability, which expose_port needs",
                    NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "capability"), "ports");
    cr_assert_str_eq(sbx_error_get0_op(err), "expose_port");
    cr_assert_str_eq(sbx_error_get0_backend(err), "local");
    sbx_error_clear(&err);
    cr_assert_null(sbx_agent_context_resolve_port(ctx, 40123, &err));
    tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "which resolve_port needs", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_agent_context_list_ports(ctx, &ports, &n, &err), -1);
    cr_assert_null(ports);
    cr_assert_eq(n, 0);
    tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "which list_ports needs", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_agent_context_unexpose_port(ctx, 40123, &err), -1);
    tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "which unexpose_port needs", NULL);
    sbx_error_clear(&err);
    sbx_agent_context_free(ctx);
    /* The refused expose exposed nothing. */
    cr_assert_eq(sbx_sandbox_list_ports(sandbox, &ports, &n, &err), 0);
    cr_assert_eq(n, 0);
    cr_assert_null(ports);

    ctx = sbx_sandbox_agent_tools(sandbox, SBX_AGENT_CAP_PORTS, &err);
    cr_assert_not_null(ctx);
    cr_assert_eq(sbx_agent_context_expose_port(ctx, 40123, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_agent_context_list_ports(ctx, &ports, &n, &err), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(ports[0], 40123);
    free(ports);
    ep = sbx_agent_context_resolve_port(ctx, 40123, &err);
    cr_assert_not_null(ep, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_str_eq(ep, "127.0.0.1:40123");
    free(ep);
    cr_assert_eq(sbx_agent_context_unexpose_port(ctx, 40123, &err), 0);
    cr_assert_null(sbx_agent_context_resolve_port(ctx, 40123, &err));
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "port 40123 of sandbox ", " is not exposed", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "port"), "40123");
    sbx_error_clear(&err);
    /* The files capability was not granted this time. */
    cr_assert_eq(sbx_agent_context_write_file(ctx, "/p.txt", "p", 1, &err), -1);
    tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "\"files\" capability", NULL);
    sbx_error_free(err);
    sbx_agent_context_free(ctx);
}

/* An outside agent: writes what it was asked, reads it back, and tries a
 * shell it may not have when asked to. */
static int
outside(sbx_agent_context *ctx, const char *prompt, void *user_data, char **answer,
        sbx_error **error)
{
    char *data = NULL;
    size_t len = 0;
    sbx_result *r;

    (void)user_data;
    if (strcmp(prompt, "use the shell") == 0) {
        r = sbx_agent_context_shell(ctx, "true", 0, error);
        sbx_result_free(r);
        return r ? 0 : -1;
    }
    if (sbx_agent_context_write_file(ctx, "/notes.txt", prompt, strlen(prompt), error) < 0 ||
        sbx_agent_context_read_file(ctx, "/notes.txt", &data, &len, error) < 0)
        return -1;
    *answer = data;
    return 0;
}

Test(specs, an_outside_agent_works_through_its_checked_context)
{
    sbx_error *err = NULL;
    char *answer = sbx_sandbox_run_outside_agent(sandbox, SBX_AGENT_CAP_DEFAULT, outside,
                                                 "remember this", NULL, &err);

    cr_assert_not_null(answer, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_str_eq(answer, "remember this");
    free(answer);
    cr_assert_null(sbx_sandbox_run_outside_agent(sandbox, SBX_AGENT_CAP_FILES, outside,
                                                 "use the shell", NULL, &err));
    tu_assert_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "\"shell\" capability", NULL);
    sbx_error_free(err);
}

static sbx_result *
inside(const char *command, sbx_agent_input input, const char *prompt)
{
    sbx_inside_agent spec = SBX_INSIDE_AGENT_INIT;
    sbx_error *err = NULL;
    sbx_result *r;

    spec.command = command;
    spec.input = input;
    r = sbx_sandbox_run_inside_agent(sandbox, &spec, prompt, &err);
    cr_assert_not_null(r, "%s: %s", command, err ? sbx_error_get0_message(err) : "");
    return r;
}

Test(specs, an_inside_agent_gets_the_prompt_by_stdin_argv_file_or_not_at_all)
{
    const char *prompt = "it's \"$HOME\" & `x`";
    sbx_inside_agent spec = SBX_INSIDE_AGENT_INIT;
    sbx_error *err = NULL;
    sbx_result *r;

    r = inside("tr a-z A-Z", SBX_AGENT_INPUT_STDIN, "shout");
    tu_assert_stdout(r, "SHOUT");
    sbx_result_free(r);
    /* The prompt is an argument, never part of the script. */
    r = inside("printf '[%s]'", SBX_AGENT_INPUT_ARGV, prompt);
    tu_assert_stdout(r, "[it's \"$HOME\" & `x`]");
    sbx_result_free(r);
    r = inside("printf '%s|' \"$SBX_AGENT_INPUT\"; cat \"$SANDBOX_ROOT$SBX_AGENT_INPUT\"",
               SBX_AGENT_INPUT_FILE, "from a file");
    tu_assert_stdout(r, "/tmp/agent-input.txt|from a file");
    sbx_result_free(r);
    cr_assert_not(file_exists("/tmp/agent-input.txt"), "the prompt file was left behind");
    r = inside("echo none; exit 3", SBX_AGENT_INPUT_NONE, NULL);
    tu_assert_stdout(r, "none\n");
    cr_assert_eq(sbx_result_get_exit_code(r), 3);
    sbx_result_free(r);

    cr_assert_null(sbx_sandbox_run_inside_agent(sandbox, &spec, "x", &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "command", NULL);
    sbx_error_clear(&err);
    spec.command = "cat";
    cr_assert_null(sbx_sandbox_run_inside_agent(sandbox, &spec, NULL, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "prompt", NULL);
    sbx_error_free(err);
}

/* ------------------------------------------------------------ any backend */

/* On the backend under test ($SBX_TEST_BACKEND): the stand-ins copied into
 * the sandbox, as an agent CLI installed there would be. */
Test(backend, run_agent_reads_the_cli_installed_in_the_sandbox, .timeout = 120)
{
    sbx_sandbox *sb;
    sbx_client *c;
    sbx_error *err = NULL;
    sbx_agent_request req = SBX_AGENT_REQUEST_INIT;
    sbx_agent_run *run;
    sbx_usage u = SBX_USAGE_INIT;
    char *src = tu_strdup_printf("%s/agents", getenv("SBX_TEST_SRCDIR"));
    char *path;
    const char *env[2] = { NULL, NULL };

    c = sbx_client_new(tu_backend(), &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sb = tu_create(c, NULL);
    cr_assert(sbx_sandbox_upload_dir(sb, src, "/opt/sbx-agents", &err) > 0, "%s",
              err ? sbx_error_get0_message(err) : "");
    /* A command sees the sandbox's /opt under its root (local's directory). */
    path = tu_strdup_printf("PATH=%s/opt/sbx-agents:/usr/local/bin:/usr/bin:/bin",
                            sbx_sandbox_get0_root(sb));
    env[0] = path;
    req.env = env;
    req.prompt = "F1";
    run = sbx_sandbox_run_agent(sb, &req, &err);
    cr_assert_not_null(run, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_agent_run_get_status(run), SBX_AGENT_SUCCEEDED, "%s",
                 sbx_agent_run_get0_reason(run));
    cr_assert_str_eq(sbx_agent_run_get0_text(run), "done");
    sbx_agent_run_free(run);
    req.harness = SBX_AGENT_OPENCODE;
    req.prompt = "F5";
    run = sbx_sandbox_run_agent(sb, &req, &err);
    cr_assert_not_null(run, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_str_eq(sbx_agent_run_get0_text(run), "PONG");
    sbx_agent_run_free(run);
    cr_assert_eq(sbx_sandbox_get_usage(sb, &u, &err), 0);
    cr_assert_eq(u.calls, 2);
    assert_usd(u.llm_cost_pusd, "0.0842415");
    cr_assert_eq(u.llm_cost_unknown, 0);
    assert_tokens(&u, 12 + 23088, 842 + 197, 31, 20480 + 10880, 5120 + 256);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    free(path);
    free(src);
}

/* ------------------------------------------------------------ asynchronous */

typedef struct async_got {
    int calls;
    sbx_agent_run *run;
    int64_t value;
    sbx_op_kind kind;
    sbx_error *error;
} async_got;

static void
on_done(sbx_op *op, void *user_data)
{
    async_got *got = user_data;

    got->calls++;
    got->kind = sbx_op_get_kind(op);
    got->run = sbx_op_steal_agent_run(op);
    got->value = sbx_op_get_int64(op);
    got->error = sbx_op_steal_error(op);
}

TestSuite(async_agent, .init = agent_setup, .fini = agent_teardown, .timeout = 60);

Test(async_agent, run_agent_and_apply_patch_have_asynchronous_forms)
{
    char prompt[] = "F5";
    const char *env[] = { path_env, NULL };
    char patch[] = "--- f.txt\n+++ f.txt\n@@ -1 +1 @@\n-x\n+y\n";
    sbx_agent_request req = SBX_AGENT_REQUEST_INIT;
    async_got got = { 0 };
    sbx_error *err = NULL;
    sbx_async *async = sbx_async_new(2, &err);
    sbx_usage u = SBX_USAGE_INIT;

    cr_assert_not_null(async);
    req.harness = SBX_AGENT_OPENCODE;
    req.prompt = prompt;
    req.env = env;
    cr_assert_not_null(sbx_sandbox_run_agent_async(async, sandbox, &req, on_done, &got, &err));
    /* The request was copied: the caller's buffers may change at once. */
    strcpy(prompt, "XX");
    while (got.calls == 0)
        sbx_async_wait(async, -1);
    cr_assert_eq(got.kind, SBX_OP_RUN_AGENT);
    cr_assert_null(got.error, "%s", got.error ? sbx_error_get0_message(got.error) : "");
    cr_assert_not_null(got.run);
    cr_assert_str_eq(sbx_agent_run_get0_text(got.run), "PONG");
    cr_assert_eq(sbx_agent_run_get_usage(got.run, &u), 0);
    assert_llm_cost(&u, "0.011117");
    sbx_agent_run_free(got.run);

    put("/w/f.txt", "x\n");
    memset(&got, 0, sizeof got);
    cr_assert_not_null(sbx_sandbox_apply_patch_async(async, sandbox, patch, strlen(patch), 0,
                                                     "/w", on_done, &got, &err));
    memset(patch, 0, sizeof patch);
    while (got.calls == 0)
        sbx_async_wait(async, -1);
    cr_assert_eq(got.kind, SBX_OP_APPLY_PATCH);
    cr_assert_null(got.error);
    cr_assert_eq(got.value, 1);
    assert_file("/w/f.txt", "y\n");

    cr_assert_null(sbx_sandbox_run_agent_async(async, sandbox, NULL, on_done, &got, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "request", NULL);
    sbx_error_free(err);
    sbx_async_free(async);
}

/* The asynchronous form reads the request within its struct_size, as the
 * synchronous one does: fields past it (a caller built with an older
 * header has none; here they hold pointers that must not be read) are not
 * read, and a struct_size that does not reach the prompt is refused at
 * submission, naming it. */
Test(async_agent, the_request_is_read_within_its_struct_size)
{
    sbx_agent_request req = SBX_AGENT_REQUEST_INIT;
    async_got got = { 0 };
    sbx_error *err = NULL;
    sbx_async *async = sbx_async_new(1, &err);

    cr_assert_not_null(async);
    req.struct_size = offsetof(sbx_agent_request, model);
    req.prompt = "F1";
    req.model = (const char *)8;
    req.env = (const char *const *)8;
    req.command = (const char *)8;
    cr_assert_not_null(sbx_sandbox_run_agent_async(async, sandbox, &req, on_done, &got, &err),
                       "%s", err ? sbx_error_get0_message(err) : "");
    while (got.calls == 0)
        sbx_async_wait(async, -1);
    /* Without the env past struct_size, the stand-in is not on PATH. */
    cr_assert_null(got.run);
    tu_assert_error(got.error, SBX_ERROR_COMMAND_FAILED,
                    "the claude-code CLI \"claude\" was not found", NULL);
    sbx_error_free(got.error);

    req.struct_size = 3;
    cr_assert_null(sbx_sandbox_run_agent_async(async, sandbox, &req, on_done, &got, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "request struct_size is 3, needs at least",
                    NULL);
    sbx_error_free(err);
    sbx_async_free(async);
}

Test(patch, a_write_that_fails_puts_the_files_written_before_it_back)
{
    static const char p[] =
        "--- a.txt\n+++ a.txt\n@@ -1 +1 @@\n-old\n+new\n"
        "--- /dev/null\n+++ blocker/x.txt\n@@ -0,0 +1 @@\n+x\n";
    sbx_error *err = NULL;

    put("/w/a.txt", "old\n");
    /* blocker is a file: x.txt cannot be made under it. */
    put("/w/blocker", "in the way\n");
    cr_assert_eq(sbx_sandbox_apply_patch(sandbox, p, strlen(p), 0, "/w", &err), -1);
    cr_assert_not_null(err);
    cr_assert_null(sbx_error_get0_context(err, "not_restored"));
    sbx_error_free(err);
    assert_file("/w/a.txt", "old\n");
    assert_file("/w/blocker", "in the way\n");
}
