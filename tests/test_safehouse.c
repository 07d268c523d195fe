/*
 * test_safehouse.c — the safehouse backend without its CLI: create and
 * probe fail with a configuration error saying how to install it, and leave
 * nothing behind. (tests/safehouse.sh runs the backend-neutral suites on it
 * with a stand-in CLI.)
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include <sbx/sbx.h>

#include "testutil.h"

static sbx_client *g_client;
static char *g_tmp;

static void setup(void)
{
    g_tmp = tu_fresh_tmpdir();
    unsetenv("SBX_SAFEHOUSE");
    sbx_error *err = NULL;
    g_client = sbx_client_new("safehouse", &err);
    cr_assert_not_null(g_client, "sbx_client_new(safehouse): %s",
                       err ? sbx_error_get0_message(err) : "");
}

static void teardown(void)
{
    sbx_client_free(g_client);
    tu_rmtree(g_tmp);
    free(g_tmp);
}

TestSuite(safehouse, .init = setup, .fini = teardown, .timeout = 60);

#ifndef __APPLE__
Test(safehouse, off_macos_without_cli_is_configuration_error)
{
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, NULL, &err));
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "macOS",
                    "brew install eugene1g/safehouse/agent-safehouse", NULL);
    cr_assert_str_eq(sbx_error_get0_backend(err), "safehouse");
    sbx_error_free(err);
    uint64_t caps = 0;
    err = NULL;
    cr_assert_neq(sbx_client_probe(g_client, &caps, &err), 0);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "agent-safehouse", NULL);
    sbx_error_free(err);
    cr_assert_eq(tu_count_entries(g_tmp), 0, "a refused create left something in %s", g_tmp);
}
#endif

Test(safehouse, unusable_cli_is_configuration_error)
{
    char *bad = tu_strdup_printf("%s/no-safehouse", g_tmp);
    setenv("SBX_SAFEHOUSE", bad, 1);
    sbx_error *err = NULL;
    /* A client made now: an out-of-process plugin sees the environment as
     * it was when its client was made. */
    sbx_client *c = sbx_client_new("safehouse", &err);
    cr_assert_not_null(c, "sbx_client_new: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_null(sbx_sandbox_create(c, NULL, &err));
    sbx_client_free(c);
    unsetenv("SBX_SAFEHOUSE");
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, bad, "agent-safehouse", NULL);
    sbx_error_free(err);
    cr_assert_eq(tu_count_entries(g_tmp), 0, "a refused create left something in %s", g_tmp);
    free(bad);
}
