/*
 * Unit tests of the parts of the API that need no sandbox: version, error
 * codes and their rendering, capability names, creation options.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sbx/sbx.h>

#include <stdio.h>

#include "testutil.h"

Test(api, version)
{
    cr_assert_str_eq(sbx_version(), "0.1.0");
    cr_assert_str_eq(sbx_version(), SBX_VERSION_STRING);
    cr_assert_eq(SBX_VERSION_MAJOR, 0);
    cr_assert_eq(SBX_VERSION_MINOR, 1);
    cr_assert_eq(SBX_VERSION_PATCH, 0);
    cr_assert_eq(sbx_version(), sbx_version(), "not a static string");
}

Test(api, plugin_dir)
{
    const char *d = sbx_plugin_dir();
    cr_assert_not_null(d);
    size_t n = strlen(d);
    cr_assert(n > strlen("/plugins"), "plugin dir \"%s\"", d);
    cr_assert_str_eq(d + n - strlen("/libsbx/plugins"), "/libsbx/plugins");
    cr_assert_eq(d[0], '/', "plugin dir \"%s\" is not absolute", d);
}

/* ------------------------------------------------------------------ errors */

Test(errors, code_names)
{
    static const char *const names[SBX_ERROR_CODE_COUNT] = {
        [SBX_ERROR_UNKNOWN] = "unknown",
        [SBX_ERROR_BACKEND_NOT_INSTALLED] = "backend_not_installed",
        [SBX_ERROR_CONFIGURATION] = "configuration",
        [SBX_ERROR_CREATION_FAILED] = "creation_failed",
        [SBX_ERROR_EXECUTION_FAILED] = "execution_failed",
        [SBX_ERROR_COMMAND_FAILED] = "command_failed",
        [SBX_ERROR_TIMEOUT] = "timeout",
        [SBX_ERROR_CONNECTION] = "connection",
        [SBX_ERROR_AUTHENTICATION] = "authentication",
        [SBX_ERROR_NOT_FOUND] = "not_found",
        [SBX_ERROR_FEATURE_NOT_SUPPORTED] = "feature_not_supported",
        [SBX_ERROR_WORKSPACE] = "workspace",
        [SBX_ERROR_RATE_LIMITED] = "rate_limited",
        [SBX_ERROR_INVALID_ARGUMENT] = "invalid_argument",
        [SBX_ERROR_CANCELLED] = "cancelled",
        [SBX_ERROR_RESOURCE_EXHAUSTED] = "resource_exhausted",
    };
    cr_assert_eq(SBX_ERROR_CODE_COUNT, 16);
    for (int c = 0; c < SBX_ERROR_CODE_COUNT; c++) {
        cr_assert_not_null(names[c]);
        cr_assert_str_eq(sbx_error_code_name((sbx_error_code)c), names[c], "code %d", c);
    }
    /* Explicit, append-only values. */
    cr_assert_eq(SBX_ERROR_BACKEND_NOT_INSTALLED, 1);
    cr_assert_eq(SBX_ERROR_NOT_FOUND, 9);
    cr_assert_eq(SBX_ERROR_INVALID_ARGUMENT, 13);
    cr_assert_eq(SBX_ERROR_CANCELLED, 14);
    cr_assert_eq(SBX_ERROR_RESOURCE_EXHAUSTED, 15);
    cr_assert_str_eq(sbx_error_code_name((sbx_error_code)SBX_ERROR_CODE_COUNT), "unknown");
    cr_assert_str_eq(sbx_error_code_name((sbx_error_code)1000), "unknown");
    cr_assert_str_eq(sbx_error_code_name((sbx_error_code)-1), "unknown");
}

Test(errors, strerror_is_total)
{
    for (int c = -1; c <= SBX_ERROR_CODE_COUNT + 1; c++) {
        const char *s = sbx_strerror((sbx_error_code)c);
        cr_assert_not_null(s, "sbx_strerror(%d) is NULL", c);
        cr_assert_neq(s[0], '\0', "sbx_strerror(%d) is empty", c);
    }
    /* Distinct codes have distinct descriptions. */
    for (int a = 0; a < SBX_ERROR_CODE_COUNT; a++)
        for (int b = a + 1; b < SBX_ERROR_CODE_COUNT; b++)
            cr_assert_str_neq(sbx_strerror((sbx_error_code)a),
                              sbx_strerror((sbx_error_code)b), "codes %d and %d", a, b);
}

/* An invalid_argument error from the options API. */
static sbx_error *options_error(void)
{
    sbx_options *o = sbx_options_new();
    cr_assert_not_null(o);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_options_set_timeout_secs(o, -3.0, &err), -1);
    cr_assert_not_null(err);
    sbx_options_free(o);
    return err;
}

Test(errors, options_error_fields)
{
    sbx_error *err = options_error();
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_FAILED);
    const char *msg = sbx_error_get0_message(err);
    cr_assert_not_null(msg);
    cr_assert_neq(msg[0], '\0');
    cr_assert(strstr(msg, "-3") != NULL, "message \"%s\" does not name the value", msg);
    /* No backend was chosen: "" rather than NULL. */
    cr_assert_not_null(sbx_error_get0_backend(err));
    cr_assert_str_eq(sbx_error_get0_backend(err), "");
    cr_assert_not_null(sbx_error_get0_op(err));
    sbx_error_free(err);
}

Test(errors, to_string_format)
{
    sbx_error *err = options_error();
    char *s = sbx_error_to_string(err);
    cr_assert_not_null(s);
    char *want = tu_expected_error_string(err);
    cr_assert_str_eq(s, want);
    /* Literally: the message, then the bracket with the code first; no
     * ", retryable" and no empty backend. */
    char *prefix = tu_strdup_printf("%s [code=invalid_argument", sbx_error_get0_message(err));
    cr_assert_eq(strncmp(s, prefix, strlen(prefix)), 0, "\"%s\"", s);
    cr_assert_eq(s[strlen(s) - 1], ']');
    cr_assert(strstr(s, "retryable") == NULL, "\"%s\"", s);
    cr_assert(strstr(s, "outcome") == NULL, "\"%s\" renders a failed outcome", s);
    cr_assert(strstr(s, "backend=") == NULL, "\"%s\" renders an empty backend", s);
    free(prefix);
    free(want);
    free(s);
    sbx_error_free(err);
}

Test(errors, to_string_with_backend_op_and_context)
{
    sbx_error *err = NULL;
    cr_assert_null(sbx_client_new("nosuchbackend", &err));
    cr_assert_not_null(err);
    char *s = sbx_error_to_string(err);
    char *want = tu_expected_error_string(err);
    cr_assert_str_eq(s, want);
    char *prefix = tu_strdup_printf("%s [code=backend_not_installed; backend=nosuchbackend; "
                                    "op=client_new; ",
                                    sbx_error_get0_message(err));
    cr_assert_eq(strncmp(s, prefix, strlen(prefix)), 0, "\"%s\" does not start with \"%s\"",
                 s, prefix);
    char *searched = tu_strdup_printf("searched=%s", sbx_error_get0_context(err, "searched"));
    cr_assert(strstr(s, searched) != NULL, "\"%s\" lacks \"%s\"", s, searched);
    free(searched);
    free(prefix);
    free(want);
    free(s);
    sbx_error_free(err);
}

Test(errors, context_iteration)
{
    sbx_error *err = NULL;
    cr_assert_null(sbx_client_new("nosuchbackend", &err));
    size_t n = sbx_error_get_context_count(err);
    cr_assert(n >= 2, "context has %zu entries", n);
    int saw_searched = 0, saw_package = 0;
    for (size_t i = 0; i < n; i++) {
        const char *k = NULL, *v = NULL;
        cr_assert_eq(sbx_error_get0_context_at(err, i, &k, &v), 0);
        cr_assert_not_null(k);
        cr_assert_not_null(v);
        cr_assert_str_eq(sbx_error_get0_context(err, k), v);
        saw_searched += strcmp(k, "searched") == 0;
        saw_package += strcmp(k, "package") == 0;
    }
    cr_assert_eq(saw_searched, 1);
    /* No package for a name this project does not ship. */
    cr_assert_eq(saw_package, 0);
    const char *k = "unchanged", *v = "unchanged";
    cr_assert_eq(sbx_error_get0_context_at(err, n, &k, &v), -1);
    cr_assert_eq(sbx_error_get0_context_at(err, n + 100, &k, &v), -1);
    cr_assert_null(sbx_error_get0_context(err, "no-such-key"));
    sbx_error_free(err);
}

Test(errors, retryable_only_for_transient_codes)
{
    /* Every error this test can provoke without a provider: none of them
     * is retryable (timeout, connection and rate_limited are the only
     * retryable codes). */
    sbx_error *err = options_error();
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    sbx_error_free(err);

    err = NULL;
    cr_assert_null(sbx_client_new("nosuchbackend", &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_BACKEND_NOT_INSTALLED);
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    sbx_error_free(err);

    err = NULL;
    cr_assert_null(sbx_client_new("badabi", &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    sbx_error_free(err);

    err = NULL;
    cr_assert_null(sbx_client_new("BAD", &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    sbx_error_free(err);
}

Test(errors, existing_error_is_not_overwritten)
{
    sbx_error *first = options_error();
    sbx_error *err = first;
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_env(o, "1A", "x", &err), -1);
    cr_assert_eq(err, first, "an error already stored was replaced");
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    /* A NULL error pointer is allowed. */
    cr_assert_eq(sbx_options_set_env(o, "1A", "x", NULL), -1);
    sbx_options_free(o);
    sbx_error_clear(&err);
    cr_assert_null(err);
    sbx_error_clear(&err);
    sbx_error_clear(NULL);
    sbx_error_free(NULL);
}

Test(errors, free_functions_accept_null)
{
    sbx_options_free(NULL);
    sbx_client_free(NULL);
    sbx_sandbox_free(NULL);
    sbx_result_free(NULL);
    sbx_backend_info_list_free(NULL, 0);
    cr_assert(1);
}

/* ------------------------------------------------------------ capabilities */

Test(caps, names)
{
    static const struct {
        uint64_t cap;
        const char *name;
    } caps[] = {
        {SBX_CAP_EXEC, "exec"},
        {SBX_CAP_EXEC_STDIN, "exec_stdin"},
        {SBX_CAP_FILES, "files"},
        {SBX_CAP_DIR_TRANSFER, "dir_transfer"},
        {SBX_CAP_SNAPSHOT, "snapshot"},
        {SBX_CAP_RESUME, "resume"},
        {SBX_CAP_PTY, "pty"},
        {SBX_CAP_ISOLATION, "isolation"},
        {SBX_CAP_NETWORK_POLICY, "network_policy"},
        {SBX_CAP_CPU_LIMIT, "cpu_limit"},
        {SBX_CAP_MEMORY_LIMIT, "memory_limit"},
        {SBX_CAP_DISK_LIMIT, "disk_limit"},
        {SBX_CAP_GPU, "gpu"},
        {SBX_CAP_IMAGE, "image"},
        {SBX_CAP_LIFETIME, "lifetime"},
        {SBX_CAP_LIST_OWNED, "list_owned"},
        {SBX_CAP_EXPOSED_PORTS, "exposed_ports"},
        {SBX_CAP_BACKGROUND, "background"},
        {SBX_CAP_EXEC_STDIN_STREAM, "exec_stdin_stream"},
        {SBX_CAP_USER, "user"},
        {SBX_CAP_OWNER_WATCH, "owner_watch"},
    };
    size_t n = sizeof caps / sizeof caps[0];
    cr_assert_eq(n, 21);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(caps[i].cap, UINT64_C(1) << i, "bit %zu", i);
        const char *got = sbx_capability_name(caps[i].cap);
        cr_assert_not_null(got, "no name for bit %zu", i);
        cr_assert_str_eq(got, caps[i].name, "bit %zu", i);
    }
    cr_assert_null(sbx_capability_name(0));
    cr_assert_null(sbx_capability_name(SBX_CAP_EXEC | SBX_CAP_FILES));
    cr_assert_null(sbx_capability_name(SBX_CAP_CPU_LIMIT | SBX_CAP_MEMORY_LIMIT));
    cr_assert_null(sbx_capability_name(UINT64_C(1) << 21));
    cr_assert_null(sbx_capability_name(UINT64_C(1) << 63));
    cr_assert_null(sbx_capability_name(UINT64_MAX));
}

/* ----------------------------------------------------------------- options */

static const sbx_option_field all_fields[] = {
    SBX_OPTION_ENV_VARS, SBX_OPTION_WORKDIR, SBX_OPTION_TIMEOUT_SECS, SBX_OPTION_CPU,
    SBX_OPTION_MEMORY_MB, SBX_OPTION_GIT_REPO, SBX_OPTION_GIT_REF, SBX_OPTION_IMAGE,
    SBX_OPTION_TEMPLATE, SBX_OPTION_SNAPSHOT_ID, SBX_OPTION_APP_NAME, SBX_OPTION_GPU,
    SBX_OPTION_DISK_MB, SBX_OPTION_ALLOW_INTERNET, SBX_OPTION_BACKEND_OPTIONS,
    SBX_OPTION_USER,
};

static void assert_only_set(const sbx_options *o, unsigned mask)
{
    for (size_t i = 0; i < sizeof all_fields / sizeof all_fields[0]; i++) {
        int want = (mask & (unsigned)all_fields[i]) != 0;
        cr_assert_eq(sbx_options_is_set(o, all_fields[i]), want, "field %#x is_set %d",
                     (unsigned)all_fields[i], sbx_options_is_set(o, all_fields[i]));
    }
}

Test(options, defaults)
{
    sbx_options *o = sbx_options_new();
    cr_assert_not_null(o);
    assert_only_set(o, 0);
    cr_assert_eq(sbx_options_get_timeout_secs(o), 600.0);
    cr_assert_eq(sbx_options_get_cpu(o), 1.0);
    cr_assert_eq(sbx_options_get_memory_mb(o), 1024);
    cr_assert_eq(SBX_DEFAULT_TIMEOUT_SECS, 600.0);
    cr_assert_eq(SBX_DEFAULT_CPU, 1.0);
    cr_assert_eq(SBX_DEFAULT_MEMORY_MB, 1024);
    cr_assert_null(sbx_options_get0_workdir(o));
    cr_assert_null(sbx_options_get0_env(o, "PATH"));
    cr_assert_null(sbx_options_get0_env(o, "A"));
    sbx_options_free(o);
}

Test(options, user_is_a_name_or_uid_and_a_bad_one_is_named)
{
    sbx_options *o = sbx_options_new();
    sbx_error *err = NULL;
    cr_assert_null(sbx_options_get0_user(o));
    cr_assert_eq(sbx_options_set_user(o, "app", &err), 0);
    assert_only_set(o, SBX_OPTION_USER);
    cr_assert_str_eq(sbx_options_get0_user(o), "app");
    cr_assert_eq(sbx_options_set_user(o, "1000:1000", &err), 0);
    cr_assert_str_eq(sbx_options_get0_user(o), "1000:1000");
    const char *bad[] = { "", "a b", "x\ny", "tab\t" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(sbx_options_set_user(o, bad[i], &err), -1);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
        cr_assert(strstr(sbx_error_get0_message(err), "is not a user name or uid") != NULL,
                  "%s", sbx_error_get0_message(err));
        cr_assert_str_eq(sbx_error_get0_context(err, "user"), bad[i]);
        cr_assert_str_eq(sbx_error_get0_op(err), "set_user");
        sbx_error_clear(&err);
    }
    cr_assert_eq(sbx_options_set_user(o, NULL, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_clear(&err);
    /* A refused value leaves the one set before. */
    cr_assert_str_eq(sbx_options_get0_user(o), "1000:1000");
    sbx_options_free(o);
}

Test(options, setters_and_getters)
{
    sbx_options *o = sbx_options_new();
    sbx_error *err = NULL;
    cr_assert_eq(sbx_options_set_timeout_secs(o, 12.5, &err), 0);
    cr_assert_null(err);
    assert_only_set(o, SBX_OPTION_TIMEOUT_SECS);
    cr_assert_eq(sbx_options_get_timeout_secs(o), 12.5);

    cr_assert_eq(sbx_options_set_cpu(o, 0.5, &err), 0);
    cr_assert_eq(sbx_options_get_cpu(o), 0.5);
    cr_assert_eq(sbx_options_set_memory_mb(o, 256, &err), 0);
    cr_assert_eq(sbx_options_get_memory_mb(o), 256);

    char dir[] = "/some/dir";
    cr_assert_eq(sbx_options_set_workdir(o, dir, &err), 0);
    dir[1] = 'X'; /* the option keeps its own copy */
    cr_assert_str_eq(sbx_options_get0_workdir(o), "/some/dir");

    char key[] = "GREETING", val[] = "hello world";
    cr_assert_eq(sbx_options_set_env(o, key, val, &err), 0);
    key[0] = 'X';
    val[0] = 'X';
    cr_assert_str_eq(sbx_options_get0_env(o, "GREETING"), "hello world");
    cr_assert_null(sbx_options_get0_env(o, "XREETING"));

    cr_assert_eq(sbx_options_set_git_repo(o, "/srv/repo.git", NULL, &err), 0);
    cr_assert_null(err);
    assert_only_set(o, SBX_OPTION_TIMEOUT_SECS | SBX_OPTION_CPU | SBX_OPTION_MEMORY_MB |
                           SBX_OPTION_WORKDIR | SBX_OPTION_ENV_VARS | SBX_OPTION_GIT_REPO);
    cr_assert_eq(sbx_options_set_git_repo(o, "/srv/repo.git", "main", &err), 0);
    cr_assert_eq(sbx_options_is_set(o, SBX_OPTION_GIT_REF), 1);
    sbx_options_free(o);
}

Test(options, env_literal_values_and_replace)
{
    sbx_options *o = sbx_options_new();
    const char *v = "a b\n'q' \"d\" x=y $HOME `id` \\";
    cr_assert_eq(sbx_options_set_env(o, "_under_1", v, NULL), 0);
    cr_assert_str_eq(sbx_options_get0_env(o, "_under_1"), v);
    cr_assert_eq(sbx_options_set_env(o, "K", "first", NULL), 0);
    cr_assert_eq(sbx_options_set_env(o, "K", "second", NULL), 0);
    cr_assert_str_eq(sbx_options_get0_env(o, "K"), "second");
    cr_assert_eq(sbx_options_set_env(o, "EMPTY", "", NULL), 0);
    cr_assert_str_eq(sbx_options_get0_env(o, "EMPTY"), "");
    cr_assert_null(sbx_options_get0_env(o, "k"), "keys are case-sensitive");
    sbx_options_free(o);
}

Test(options, invalid_env_keys)
{
    const char *bad[] = {"1A", "A-B", "", "A=B", "A B", "ä", "$A", NULL};
    for (size_t i = 0; bad[i]; i++) {
        sbx_options *o = sbx_options_new();
        sbx_error *err = NULL;
        cr_assert_eq(sbx_options_set_env(o, bad[i], "v", &err), -1, "key \"%s\" accepted",
                     bad[i]);
        cr_assert_not_null(err);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT, "key \"%s\"", bad[i]);
        cr_assert_eq(sbx_error_is_retryable(err), 0);
        if (bad[i][0])
            cr_assert(strstr(sbx_error_get0_message(err), bad[i]) != NULL,
                      "message \"%s\" does not name key \"%s\"",
                      sbx_error_get0_message(err), bad[i]);
        assert_only_set(o, 0);
        cr_assert_null(sbx_options_get0_env(o, bad[i]));
        sbx_error_free(err);
        sbx_options_free(o);
    }
    sbx_options *o = sbx_options_new();
    sbx_error *err = NULL;
    cr_assert_eq(sbx_options_set_env(o, NULL, "v", &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_free(err);
    sbx_options_free(o);
}

Test(options, invalid_timeouts)
{
    /* -1 is SBX_TIMEOUT_NONE (below); any other negative is refused. */
    const double bad[] = {0.0, -2.0, -0.5, -0.0, NAN, INFINITY, -INFINITY};
    const char *text[] = {"0", "-2", "-0.5", "-0", "nan", "inf", "-inf"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sbx_options *o = sbx_options_new();
        sbx_error *err = NULL;
        cr_assert_eq(sbx_options_set_timeout_secs(o, bad[i], &err), -1, "timeout %g accepted",
                     bad[i]);
        cr_assert_not_null(err);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
        char want[160];
        snprintf(want, sizeof want, "timeout_secs must be seconds > 0 and finite, or "
                 "SBX_TIMEOUT_NONE for no lifetime (got %s)", text[i]);
        cr_assert_str_eq(sbx_error_get0_message(err), want);
        cr_assert_str_eq(sbx_error_get0_context(err, "option"), "timeout_secs");
        cr_assert_eq(sbx_options_is_set(o, SBX_OPTION_TIMEOUT_SECS), 0);
        cr_assert_eq(sbx_options_get_timeout_secs(o), 600.0);
        sbx_error_free(err);
        sbx_options_free(o);
    }
}

/* SBX_TIMEOUT_NONE is -1 (what JSON carries) and is kept as set. */
Test(options, no_lifetime)
{
    sbx_options *o = sbx_options_new();
    sbx_error *err = NULL;
    cr_assert_eq(SBX_TIMEOUT_NONE, -1.0);
    cr_assert_eq(sbx_options_set_timeout_secs(o, SBX_TIMEOUT_NONE, &err), 0);
    cr_assert_null(err);
    cr_assert_eq(sbx_options_is_set(o, SBX_OPTION_TIMEOUT_SECS), 1);
    cr_assert_eq(sbx_options_get_timeout_secs(o), -1.0);
    cr_assert_eq(sbx_options_set_timeout_secs(o, 30, &err), 0);
    cr_assert_eq(sbx_options_get_timeout_secs(o), 30.0);
    sbx_options_free(o);
}

Test(options, invalid_cpu_and_memory)
{
    const double bad_cpu[] = {0.0, -0.5, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad_cpu / sizeof bad_cpu[0]; i++) {
        sbx_options *o = sbx_options_new();
        sbx_error *err = NULL;
        cr_assert_eq(sbx_options_set_cpu(o, bad_cpu[i], &err), -1, "cpu %g accepted", bad_cpu[i]);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
        cr_assert_eq(sbx_options_is_set(o, SBX_OPTION_CPU), 0);
        cr_assert_eq(sbx_options_get_cpu(o), 1.0);
        sbx_error_free(err);
        sbx_options_free(o);
    }
    const int64_t bad_mem[] = {0, -1, INT64_MIN};
    for (size_t i = 0; i < sizeof bad_mem / sizeof bad_mem[0]; i++) {
        sbx_options *o = sbx_options_new();
        sbx_error *err = NULL;
        cr_assert_eq(sbx_options_set_memory_mb(o, bad_mem[i], &err), -1);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
        cr_assert_eq(sbx_options_is_set(o, SBX_OPTION_MEMORY_MB), 0);
        cr_assert_eq(sbx_options_get_memory_mb(o), 1024);
        sbx_error_free(err);
        sbx_options_free(o);
    }
}

Test(options, invalid_workdir_and_git_repo)
{
    sbx_options *o = sbx_options_new();
    sbx_error *err = NULL;
    cr_assert_eq(sbx_options_set_workdir(o, "", &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_options_set_workdir(o, NULL, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_options_set_git_repo(o, "", NULL, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_options_set_git_repo(o, "--upload-pack=touch /tmp/x", NULL, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(sbx_error_get0_message(err), "--upload-pack") != NULL,
              "message \"%s\" does not name the url", sbx_error_get0_message(err));
    sbx_error_clear(&err);
    cr_assert_eq(sbx_options_set_git_repo(o, NULL, NULL, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_clear(&err);
    assert_only_set(o, 0);
    cr_assert_null(sbx_options_get0_workdir(o));
    sbx_options_free(o);
}

Test(options, provider_fields)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_get_allow_internet(o), 1);
    cr_assert_eq(sbx_options_get_disk_mb(o), 0);
    cr_assert_null(sbx_options_get0_image(o));
    cr_assert_null(sbx_options_get0_backend_options(o));
    cr_assert_eq(sbx_options_set_image(o, "python:3.12-slim", NULL), 0);
    cr_assert_eq(sbx_options_set_template(o, "base", NULL), 0);
    cr_assert_eq(sbx_options_set_snapshot_id(o, "snap-1", NULL), 0);
    cr_assert_eq(sbx_options_set_app_name(o, "evals", NULL), 0);
    cr_assert_eq(sbx_options_set_gpu(o, "H100:2", NULL), 0);
    cr_assert_eq(sbx_options_set_disk_mb(o, 4096, NULL), 0);
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    cr_assert_eq(sbx_options_set_backend_options(o, "{\"create_timeout\": 120}", NULL), 0);
    assert_only_set(o, SBX_OPTION_IMAGE | SBX_OPTION_TEMPLATE | SBX_OPTION_SNAPSHOT_ID |
                       SBX_OPTION_APP_NAME | SBX_OPTION_GPU | SBX_OPTION_DISK_MB |
                       SBX_OPTION_ALLOW_INTERNET | SBX_OPTION_BACKEND_OPTIONS);
    cr_assert_str_eq(sbx_options_get0_image(o), "python:3.12-slim");
    cr_assert_str_eq(sbx_options_get0_template(o), "base");
    cr_assert_str_eq(sbx_options_get0_snapshot_id(o), "snap-1");
    cr_assert_str_eq(sbx_options_get0_app_name(o), "evals");
    cr_assert_str_eq(sbx_options_get0_gpu(o), "H100:2");
    cr_assert_eq(sbx_options_get_disk_mb(o), 4096);
    cr_assert_eq(sbx_options_get_allow_internet(o), 0);
    cr_assert_str_eq(sbx_options_get0_backend_options(o), "{\"create_timeout\": 120}");
    /* A second set replaces the value. */
    cr_assert_eq(sbx_options_set_gpu(o, "A100", NULL), 0);
    cr_assert_str_eq(sbx_options_get0_gpu(o), "A100");
    cr_assert_eq(sbx_options_set_allow_internet(o, 7, NULL), 0);
    cr_assert_eq(sbx_options_get_allow_internet(o), 1);
    sbx_options_free(o);
}

Test(options, invalid_provider_fields)
{
    const char *bad_gpu[] = {"", ":2", "H100:", "H100:0", "H100:x", "A:1:2", "H100:-1"};
    for (size_t i = 0; i < sizeof bad_gpu / sizeof bad_gpu[0]; i++) {
        sbx_options *o = sbx_options_new();
        sbx_error *err = NULL;
        cr_assert_eq(sbx_options_set_gpu(o, bad_gpu[i], &err), -1, "gpu \"%s\" accepted",
                     bad_gpu[i]);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
        char want[64];
        snprintf(want, sizeof want, "\"%s\"", bad_gpu[i]);
        cr_assert(strstr(sbx_error_get0_message(err), want) != NULL,
                  "message \"%s\" does not name %s", sbx_error_get0_message(err), want);
        cr_assert_eq(sbx_options_is_set(o, SBX_OPTION_GPU), 0);
        cr_assert_null(sbx_options_get0_gpu(o));
        sbx_error_free(err);
        sbx_options_free(o);
    }
    /* Refused naming where the text goes wrong, never repeating it (it may
     * hold a credential). */
    const char *bad_json[] = {"[1]", "{\"a\":", "42", "\"s\"", "null", "{oops", "{} x"};
    const char *bad_why[] = {
        "invalid backend_options: a JSON object is expected",
        "invalid backend_options: not JSON at offset 5: unexpected end of the document",
        "invalid backend_options: a JSON object is expected",
        "invalid backend_options: a JSON object is expected",
        "invalid backend_options: a JSON object is expected",
        "invalid backend_options: not JSON at offset 1: quoted object property name expected",
        "invalid backend_options: not JSON at offset 3: unexpected text after the document",
    };
    for (size_t i = 0; i < sizeof bad_json / sizeof bad_json[0]; i++) {
        sbx_options *o = sbx_options_new();
        sbx_error *err = NULL;
        cr_assert_eq(sbx_options_set_backend_options(o, bad_json[i], &err), -1,
                     "backend_options %s accepted", bad_json[i]);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
        cr_assert_str_eq(sbx_error_get0_message(err), bad_why[i]);
        cr_assert_str_eq(sbx_error_get0_context(err, "option"), "backend_options");
        cr_assert_eq(sbx_options_is_set(o, SBX_OPTION_BACKEND_OPTIONS), 0);
        sbx_error_free(err);
        sbx_options_free(o);
    }
    sbx_options *o = sbx_options_new();
    sbx_error *err = NULL;
    cr_assert_eq(sbx_options_set_image(o, "", &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "image");
    sbx_error_clear(&err);
    cr_assert_eq(sbx_options_set_snapshot_id(o, NULL, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_options_set_disk_mb(o, 0, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(sbx_error_get0_context(err, "value"), "0");
    sbx_error_clear(&err);
    assert_only_set(o, 0);
    sbx_options_free(o);
}

/* ------------------------------------------------------------ state dir */

static void expect_state_dir(const char *want)
{
    sbx_error *err = NULL;
    char *got = sbx_state_dir_path(&err);
    cr_assert_not_null(got, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_str_eq(got, want);
    free(got);
}

Test(state_dir, follows_sbx_state_dir_then_xdg_then_home)
{
    setenv("SBX_STATE_DIR", "/srv/sbx-state", 1);
    setenv("XDG_STATE_HOME", "/xdg", 1);
    setenv("HOME", "/home/someone", 1);
    expect_state_dir("/srv/sbx-state");
    setenv("SBX_STATE_DIR", "", 1);
    expect_state_dir("/xdg/sbx");
    unsetenv("SBX_STATE_DIR");
    expect_state_dir("/xdg/sbx");
    /* A relative XDG_STATE_HOME is ignored, as the XDG rule says. */
    setenv("XDG_STATE_HOME", "relative/state", 1);
    expect_state_dir("/home/someone/.local/state/sbx");
    unsetenv("XDG_STATE_HOME");
    expect_state_dir("/home/someone/.local/state/sbx");
}

Test(api, client_config_that_is_not_a_json_object_is_named)
{
    static const char *bad[] = { "[1, 2]", "not json", "\"text\"" };
    static const char *msg[] = { "client config '[1, 2]' is not a JSON object",
                                 "client config 'not json' is not a JSON object",
                                 "client config '\"text\"' is not a JSON object" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sbx_error *err = NULL;
        cr_assert_null(sbx_client_new_with_config("local", SBX_PLUGIN_MODE_IN_PROCESS, bad[i],
                                                  &err));
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
        cr_assert_str_eq(sbx_error_get0_message(err), msg[i]);
        cr_assert_str_eq(sbx_error_get0_context(err, "config"), "not a JSON object");
        cr_assert_str_eq(sbx_error_get0_backend(err), "local");
        cr_assert_str_eq(sbx_error_get0_op(err), "client_new");
        sbx_error_free(err);
    }
}

/* The language check execute_code makes, on its own: known names and NULL
 * pass, another is invalid_argument naming it. */
Test(errors, code_language_check)
{
    const char *known[] = { "python", "bash", "sh", "shell", "node", "javascript", "js",
                            "typescript", "ts", "ruby", "go" };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        cr_assert_eq(sbx_code_language_check(known[i], NULL), 0, "%s", known[i]);
    cr_assert_eq(sbx_code_language_check(NULL, NULL), 0);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_code_language_check("Python", &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(sbx_error_get0_message(err), "unknown language \"Python\" (known: python, "
                                                  "bash, sh, node, javascript, typescript, "
                                                  "ruby, go)");
    cr_assert_str_eq(sbx_error_get0_op(err), "execute_code");
    cr_assert_str_eq(sbx_error_get0_context(err, "language"), "Python");
    sbx_error_free(err);
    cr_assert_eq(sbx_code_language_check("cobol", NULL), -1);
}
