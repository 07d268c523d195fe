/*
 * Plugin discovery and the loader's checks (<sbx/plugin.h>, rules 1-4),
 * with the test-only broken plugins of tests/plugins/broken.c, and
 * sbx_backends_list().
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sbx/plugin.h>
#include <sbx/sbx.h>

#include "testutil.h"

/* Loads @backend, asserts it fails with @code and returns the error. */
static sbx_error *client_new_fails(const char *backend, sbx_error_code code)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new(backend, &err);
    cr_assert_null(c, "sbx_client_new(\"%s\") succeeded", backend ? backend : "(null)");
    cr_assert_not_null(err, "sbx_client_new(\"%s\") failed without an error",
                       backend ? backend : "(null)");
    cr_assert_eq(sbx_error_get_code(err), code,
                 "sbx_client_new(\"%s\"): code %s, expected %s (message: %s)",
                 backend ? backend : "(null)",
                 sbx_error_code_name(sbx_error_get_code(err)),
                 sbx_error_code_name(code), sbx_error_get0_message(err));
    return err;
}

static void assert_contains(const char *hay, const char *needle)
{
    cr_assert(strstr(hay, needle) != NULL, "\"%s\" does not contain \"%s\"", hay,
              needle);
}

/* A broken plugin's error: configuration, backend = the name, op =
 * client_new, not retryable, outcome failed, message with @needles. */
static void check_broken(const char *name, const char *const *needles)
{
    sbx_error *err = client_new_fails(name, SBX_ERROR_CONFIGURATION);
    const char *msg = sbx_error_get0_message(err);
    for (size_t i = 0; needles[i]; i++)
        assert_contains(msg, needles[i]);
    cr_assert_str_eq(sbx_error_get0_backend(err), name);
    cr_assert_str_eq(sbx_error_get0_op(err), "client_new");
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_FAILED);

    /* Loading again gives the same answer (the result is cached, and the
     * plugin's slots are still never called: setup would abort). */
    sbx_error *again = client_new_fails(name, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(again), msg);
    sbx_error_free(again);

    /* sbx_create() goes through the same loader. */
    sbx_error *via_create = NULL;
    cr_assert_null(sbx_create(name, NULL, &via_create));
    cr_assert_not_null(via_create);
    cr_assert_eq(sbx_error_get_code(via_create), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(via_create), msg);
    sbx_error_free(via_create);
    sbx_error_free(err);
}

Test(loader, bad_abi_major, .timeout = 20)
{
    char built[64], speaks[64];
    snprintf(built, sizeof built, "built for ABI 9.%d", SBX_PLUGIN_ABI_MINOR);
    snprintf(speaks, sizeof speaks, "host speaks %d.%d", SBX_PLUGIN_ABI_MAJOR,
             SBX_PLUGIN_ABI_MINOR);
    const char *needles[] = {built, speaks, NULL};
    check_broken("badabi", needles);
}

Test(loader, missing_init_symbol, .timeout = 20)
{
    const char *needles[] = {"does not export sbx_plugin_init", NULL};
    check_broken("nosymbol", needles);
}

Test(loader, init_returns_null, .timeout = 20)
{
    const char *needles[] = {"NULL", NULL};
    check_broken("nulldesc", needles);
}

Test(loader, short_descriptor, .timeout = 20)
{
    char want[128];
    snprintf(want, sizeof want, "descriptor is %zu bytes, ABI 1.0 needs at least %zu",
             offsetof(sbx_plugin, setup), (size_t)SBX_PLUGIN_MIN_STRUCT_SIZE);
    const char *needles[] = {want, NULL};
    check_broken("shortdesc", needles);
}

Test(loader, newer_abi_minor, .timeout = 20)
{
    char built[64], speaks[64];
    snprintf(built, sizeof built, "built for ABI %d.%d", SBX_PLUGIN_ABI_MAJOR,
             SBX_PLUGIN_ABI_MINOR + 1);
    snprintf(speaks, sizeof speaks, "host speaks %d.%d", SBX_PLUGIN_ABI_MAJOR,
             SBX_PLUGIN_ABI_MINOR);
    const char *needles[] = {built, speaks, NULL};
    check_broken("newminor", needles);
}

/* Splits a colon-separated list into a NULL-terminated array (free both). */
static char **split_path(const char *path, char **storage)
{
    *storage = strdup(path);
    cr_assert_not_null(*storage);
    size_t n = 1;
    for (const char *p = path; *p; p++)
        n += *p == ':';
    char **v = calloc(n + 1, sizeof *v);
    cr_assert_not_null(v);
    size_t i = 0;
    for (char *tok = strtok(*storage, ":"); tok; tok = strtok(NULL, ":"))
        v[i++] = tok;
    return v;
}

Test(loader, missing_backend, .timeout = 20)
{
    const char *path = getenv("SBX_PLUGIN_PATH");
    cr_assert_not_null(path, "SBX_PLUGIN_PATH must be set by the test environment");
    sbx_error *err = client_new_fails("nosuchbackend", SBX_ERROR_BACKEND_NOT_INSTALLED);
    const char *msg = sbx_error_get0_message(err);
    assert_contains(msg, "backend \"nosuchbackend\" is not installed: "
                         "no libsbx-nosuchbackend.so in ");
    cr_assert_str_eq(sbx_error_get0_backend(err), "nosuchbackend");
    cr_assert_str_eq(sbx_error_get0_op(err), "client_new");
    cr_assert_eq(sbx_error_is_retryable(err), 0);

    const char *searched = sbx_error_get0_context(err, "searched");
    cr_assert_not_null(searched, "no context \"searched\"");
    char *want = tu_strdup_printf("%s:%s", path, sbx_plugin_dir());
    cr_assert_str_eq(searched, want);
    free(want);

    char *storage;
    char **dirs = split_path(path, &storage);
    for (size_t i = 0; dirs[i]; i++) {
        assert_contains(searched, dirs[i]);
        assert_contains(msg, dirs[i]);
    }
    free(dirs);
    free(storage);
    assert_contains(msg, sbx_plugin_dir());

    /* A name this project does not ship gets no package hint; the
     * installed backends are listed instead. */
    cr_assert_null(sbx_error_get0_context(err, "package"));
    cr_assert(strstr(msg, "install the") == NULL, "%s", msg);
    cr_assert_str_eq(sbx_error_get0_context(err, "installed"),
                     "badabi, bubblewrap, crashinit, docker, faulty, local, localexec, "
                     "newminor, nosymbol, nulldesc, safehouse, shortdesc");

    char *s = sbx_error_to_string(err);
    char *expect = tu_expected_error_string(err);
    cr_assert_str_eq(s, expect);
    free(s);
    free(expect);
    sbx_error_free(err);
}

Test(loader, missing_shipped_backend_names_its_package, .timeout = 20)
{
    cr_assert_eq(setenv("SBX_PLUGIN_PATH", "/nonexistent/sbx-a", 1), 0);
    sbx_error *err = client_new_fails("e2b", SBX_ERROR_BACKEND_NOT_INSTALLED);
    /* The plugin directory may hold the plugins of an installed build. */
    const char *installed = sbx_error_get0_context(err, "installed");
    cr_assert_not_null(installed);
    char *want = tu_strdup_printf("backend \"e2b\" is not installed: no libsbx-e2b.so in "
                                  "/nonexistent/sbx-a:%s; installed: %s (install the "
                                  "libsbx-e2b package or configure with --enable-plugin-e2b)",
                                  sbx_plugin_dir(), *installed ? installed : "none");
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    cr_assert_str_eq(sbx_error_get0_context(err, "package"), "libsbx-e2b");
    free(want);
    sbx_error_free(err);
}

Test(loader, missing_backend_names_custom_path, .timeout = 20)
{
    /* Each test runs in its own process, before any plugin is loaded. */
    cr_assert_eq(setenv("SBX_PLUGIN_PATH", "/nonexistent/sbx-a:/nonexistent/sbx-b", 1), 0);
    sbx_error *err = client_new_fails("local", SBX_ERROR_BACKEND_NOT_INSTALLED);
    char *want = tu_strdup_printf("/nonexistent/sbx-a:/nonexistent/sbx-b:%s",
                                  sbx_plugin_dir());
    cr_assert_str_eq(sbx_error_get0_context(err, "searched"), want);
    free(want);
    assert_contains(sbx_error_get0_message(err),
                    "backend \"local\" is not installed: no libsbx-local.so in ");
    assert_contains(sbx_error_get0_message(err), "/nonexistent/sbx-a");
    assert_contains(sbx_error_get0_message(err), "/nonexistent/sbx-b");
    sbx_error_free(err);
}

Test(loader, invalid_backend_names, .timeout = 20)
{
    const char *bad[] = {"../x", "", "UPPER", "a/b", "-x", "_x", "lo cal",
                         "local.so", "Local", NULL};
    for (size_t i = 0; bad[i]; i++) {
        sbx_error *err = client_new_fails(bad[i], SBX_ERROR_INVALID_ARGUMENT);
        if (bad[i][0])
            assert_contains(sbx_error_get0_message(err), bad[i]);
        cr_assert_eq(sbx_error_is_retryable(err), 0);
        sbx_error_free(err);
    }
    sbx_error *err = client_new_fails(NULL, SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_free(err);
    /* The error pointer may be NULL: the call still fails cleanly. */
    cr_assert_null(sbx_client_new("../x", NULL));
}

Test(loader, local_loads_and_is_cached, .timeout = 20)
{
    sbx_error *err = NULL;
    sbx_client *a = sbx_client_new("local", &err);
    cr_assert_null(err, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_not_null(a);
    cr_assert_str_eq(sbx_client_get0_backend(a), "local");
    sbx_client *b = sbx_client_new("local", &err);
    cr_assert_null(err);
    cr_assert_not_null(b);
    cr_assert_neq(a, b);
    cr_assert_str_eq(sbx_client_get0_backend(b), "local");

    uint64_t caps = 0;
    cr_assert_eq(sbx_client_probe(a, &caps, &err), 0);
    cr_assert_null(err);
    cr_assert(caps & SBX_CAP_EXEC, "probe of local lacks exec (caps %#llx)",
              (unsigned long long)caps);
    sbx_client_free(b);
    sbx_client_free(a);
}

Test(loader, later_dirs_are_searched, .timeout = 20)
{
    const char *path = getenv("SBX_PLUGIN_PATH");
    cr_assert_not_null(path);
    char *p = tu_strdup_printf("/nonexistent/sbx-first:%s", path);
    cr_assert_eq(setenv("SBX_PLUGIN_PATH", p, 1), 0);
    free(p);
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new("local", &err);
    cr_assert_null(err, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_not_null(c);
    sbx_client_free(c);
}

/* The directory of SBX_PLUGIN_PATH holding libsbx-@name.so (free()). */
static char *plugin_file(const char *name)
{
    const char *path = getenv("SBX_PLUGIN_PATH");
    cr_assert_not_null(path);
    char *storage;
    char **dirs = split_path(path, &storage);
    char *found = NULL;
    for (size_t i = 0; dirs[i] && !found; i++) {
        char *f = tu_strdup_printf("%s/libsbx-%s.so", dirs[i], name);
        if (access(f, R_OK) == 0)
            found = f;
        else
            free(f);
    }
    free(dirs);
    free(storage);
    cr_assert_not_null(found, "libsbx-%s.so not found in SBX_PLUGIN_PATH", name);
    return found;
}

static void copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    cr_assert(in >= 0, "open %s: %s", from, strerror(errno));
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    cr_assert(out >= 0, "open %s: %s", to, strerror(errno));
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        cr_assert_eq(write(out, buf, (size_t)n), n);
    cr_assert_eq(n, 0);
    close(in);
    close(out);
}

Test(loader, first_match_wins, .timeout = 20)
{
    /* A directory placed first holds a "badabi" that is really nulldesc:
     * that one must be used, in loading and in listing. */
    char *dir = tu_mkdtemp("sbx-plugins");
    char *src = plugin_file("nulldesc");
    char *dst = tu_strdup_printf("%s/libsbx-badabi.so", dir);
    copy_file(src, dst);
    char *p = tu_strdup_printf("%s:%s", dir, getenv("SBX_PLUGIN_PATH"));
    cr_assert_eq(setenv("SBX_PLUGIN_PATH", p, 1), 0);

    sbx_error *err = client_new_fails("badabi", SBX_ERROR_CONFIGURATION);
    assert_contains(sbx_error_get0_message(err), "NULL");
    cr_assert(strstr(sbx_error_get0_message(err), "built for ABI 9") == NULL,
              "the second libsbx-badabi.so was used: %s", sbx_error_get0_message(err));
    sbx_error_free(err);

    sbx_backend_info **list = NULL;
    size_t count = 0;
    cr_assert_eq(sbx_backends_list(&list, &count, NULL), 0);
    int seen = 0;
    for (size_t i = 0; i < count; i++) {
        if (strcmp(sbx_backend_info_get0_name(list[i]), "badabi") != 0)
            continue;
        seen++;
        cr_assert_str_eq(sbx_backend_info_get0_path(list[i]), dst);
        cr_assert_not_null(sbx_backend_info_get0_problem(list[i]));
    }
    cr_assert_eq(seen, 1, "badabi listed %d times", seen);
    sbx_backend_info_list_free(list, count);
    tu_rmtree(dir);
    free(p);
    free(dst);
    free(src);
    free(dir);
}

Test(loader, name_mismatch, .timeout = 20)
{
    /* libsbx-other.so whose descriptor says "local": refused by rule 4. */
    char *dir = tu_mkdtemp("sbx-plugins");
    char *src = plugin_file("local");
    char *dst = tu_strdup_printf("%s/libsbx-other.so", dir);
    copy_file(src, dst);
    cr_assert_eq(setenv("SBX_PLUGIN_PATH", dir, 1), 0);

    sbx_error *err = client_new_fails("other", SBX_ERROR_CONFIGURATION);
    assert_contains(sbx_error_get0_message(err), "local");
    assert_contains(sbx_error_get0_message(err), "other");
    cr_assert_str_eq(sbx_error_get0_backend(err), "other");
    cr_assert_str_eq(sbx_error_get0_op(err), "client_new");
    sbx_error_free(err);

    sbx_backend_info **list = NULL;
    size_t count = 0;
    cr_assert_eq(sbx_backends_list(&list, &count, NULL), 0);
    int seen = 0;
    for (size_t i = 0; i < count; i++) {
        if (strcmp(sbx_backend_info_get0_name(list[i]), "other") != 0)
            continue;
        seen++;
        const char *problem = sbx_backend_info_get0_problem(list[i]);
        cr_assert_not_null(problem, "a misnamed plugin is listed as usable");
        cr_assert_neq(problem[0], '\0');
        cr_assert_eq(sbx_backend_info_get_caps(list[i]), 0);
    }
    cr_assert_eq(seen, 1);
    sbx_backend_info_list_free(list, count);
    tu_rmtree(dir);
    free(dst);
    free(src);
    free(dir);
}

struct expect_listed {
    const char *name;
    unsigned abi_major, abi_minor;
};

Test(loader, backends_list, .timeout = 20)
{
    sbx_backend_info **list = NULL;
    size_t count = 0;
    sbx_error *err = NULL;
    cr_assert_eq(sbx_backends_list(&list, &count, &err), 0);
    cr_assert_null(err);
    cr_assert_not_null(list);

    /* local: usable. */
    int local_seen = 0;
    for (size_t i = 0; i < count; i++) {
        const sbx_backend_info *info = list[i];
        if (strcmp(sbx_backend_info_get0_name(info), "local") != 0)
            continue;
        local_seen++;
        cr_assert_null(sbx_backend_info_get0_problem(info), "local: %s",
                       sbx_backend_info_get0_problem(info));
        cr_assert(sbx_backend_info_get_caps(info) & SBX_CAP_EXEC);
        cr_assert_eq(sbx_backend_info_get_abi_major(info), SBX_PLUGIN_ABI_MAJOR);
        cr_assert_eq(sbx_backend_info_get_abi_minor(info), SBX_PLUGIN_ABI_MINOR);
        cr_assert_neq(sbx_backend_info_get0_version(info)[0], '\0');
        cr_assert_neq(sbx_backend_info_get0_description(info)[0], '\0');
        char *want = plugin_file("local");
        cr_assert_str_eq(sbx_backend_info_get0_path(info), want);
        free(want);
    }
    cr_assert_eq(local_seen, 1, "local listed %d times", local_seen);

    /* Each broken plugin: listed once, unusable, with a reason. */
    const struct expect_listed broken[] = {
        {"badabi", 9, SBX_PLUGIN_ABI_MINOR},
        {"nosymbol", 0, 0},
        {"nulldesc", 0, 0},
        {"shortdesc", SBX_PLUGIN_ABI_MAJOR, SBX_PLUGIN_ABI_MINOR},
        {"newminor", SBX_PLUGIN_ABI_MAJOR, SBX_PLUGIN_ABI_MINOR + 1},
    };
    for (size_t b = 0; b < sizeof broken / sizeof broken[0]; b++) {
        int seen = 0;
        for (size_t i = 0; i < count; i++) {
            const sbx_backend_info *info = list[i];
            if (strcmp(sbx_backend_info_get0_name(info), broken[b].name) != 0)
                continue;
            seen++;
            const char *problem = sbx_backend_info_get0_problem(info);
            cr_assert_not_null(problem, "%s is listed as usable", broken[b].name);
            cr_assert_neq(problem[0], '\0', "%s: empty problem", broken[b].name);
            cr_assert_eq(sbx_backend_info_get_caps(info), 0, "%s: caps of an unusable plugin",
                         broken[b].name);
            cr_assert_eq(sbx_backend_info_get_abi_major(info), broken[b].abi_major,
                         "%s: abi_major %u", broken[b].name,
                         sbx_backend_info_get_abi_major(info));
            cr_assert_eq(sbx_backend_info_get_abi_minor(info), broken[b].abi_minor,
                         "%s: abi_minor %u", broken[b].name,
                         sbx_backend_info_get_abi_minor(info));
            char *want = plugin_file(broken[b].name);
            cr_assert_str_eq(sbx_backend_info_get0_path(info), want);
            free(want);
        }
        cr_assert_eq(seen, 1, "%s listed %d times", broken[b].name, seen);
    }

    /* The problems are the loader's reasons. */
    for (size_t i = 0; i < count; i++) {
        const char *name = sbx_backend_info_get0_name(list[i]);
        const char *problem = sbx_backend_info_get0_problem(list[i]);
        if (strcmp(name, "badabi") == 0)
            assert_contains(problem, "9");
        else if (strcmp(name, "nosymbol") == 0)
            assert_contains(problem, "sbx_plugin_init");
        else if (strcmp(name, "nulldesc") == 0)
            assert_contains(problem, "NULL");
    }

    /* Listing loads the broken plugins but never calls their slots, and a
     * client of a listed plugin still fails the same way. */
    sbx_error *e2 = client_new_fails("badabi", SBX_ERROR_CONFIGURATION);
    sbx_error_free(e2);
    sbx_client *c = sbx_client_new("local", &err);
    cr_assert_null(err);
    cr_assert_not_null(c);
    sbx_client_free(c);
    sbx_backend_info_list_free(list, count);
}

Test(loader, backends_list_twice_is_stable, .timeout = 20)
{
    sbx_backend_info **a = NULL, **b = NULL;
    size_t na = 0, nb = 0;
    cr_assert_eq(sbx_backends_list(&a, &na, NULL), 0);
    cr_assert_eq(sbx_backends_list(&b, &nb, NULL), 0);
    cr_assert_eq(na, nb);
    cr_assert(na >= 6, "expected local + 5 broken plugins, got %zu", na);
    for (size_t i = 0; i < na; i++) {
        const char *name = sbx_backend_info_get0_name(a[i]);
        size_t j = 0;
        while (j < nb && strcmp(sbx_backend_info_get0_name(b[j]), name) != 0)
            j++;
        cr_assert(j < nb, "%s missing from the second listing", name);
        const char *pa = sbx_backend_info_get0_problem(a[i]);
        const char *pb = sbx_backend_info_get0_problem(b[j]);
        cr_assert_eq(pa == NULL, pb == NULL);
        if (pa)
            cr_assert_str_eq(pa, pb);
    }
    sbx_backend_info_list_free(a, na);
    sbx_backend_info_list_free(b, nb);
}
