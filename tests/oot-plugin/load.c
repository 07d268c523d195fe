/*
 * tests/oot-plugin/load.c — an application built against the installed
 * libsbx alone (`pkg-config --cflags --libs libsbx`). It checks that the
 * out-of-tree plugin "oot" (oot.c), found through SBX_PLUGIN_PATH, is
 * listed as usable with its name, version and capabilities, and that a
 * client of it can be made and probed. Prints one line per failed check on
 * stderr; exits 0 when every check passed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sbx/plugin.h>
#include <sbx/sbx.h>

static int failures;

#define CHECK(cond, ...)                                        \
    do {                                                        \
        if (!(cond)) {                                          \
            fprintf(stderr, "load: " __VA_ARGS__);              \
            fputc('\n', stderr);                                \
            failures++;                                         \
        }                                                       \
    } while (0)

int main(void)
{
    sbx_backend_info **list = NULL;
    size_t count = 0, found = 0;
    sbx_error *err = NULL;

    if (sbx_backends_list(&list, &count, &err) != 0) {
        fprintf(stderr, "load: sbx_backends_list: %s\n", sbx_error_get0_message(err));
        return 1;
    }
    for (size_t i = 0; i < count; i++) {
        const sbx_backend_info *info = list[i];
        if (strcmp(sbx_backend_info_get0_name(info), "oot") != 0)
            continue;
        found++;
        const char *problem = sbx_backend_info_get0_problem(info);
        CHECK(problem == NULL, "oot is not usable: %s", problem);
        CHECK(strcmp(sbx_backend_info_get0_version(info), "1.2.3") == 0,
              "oot version is \"%s\", expected \"1.2.3\"", sbx_backend_info_get0_version(info));
        CHECK(strcmp(sbx_backend_info_get0_description(info), "out-of-tree test plugin") == 0,
              "oot description is \"%s\"", sbx_backend_info_get0_description(info));
        CHECK(sbx_backend_info_get_caps(info) == SBX_CAP_LIFETIME,
              "oot declares caps 0x%llx, expected 0x%llx",
              (unsigned long long)sbx_backend_info_get_caps(info),
              (unsigned long long)SBX_CAP_LIFETIME);
        /* oot.c declares the ABI of the installed <sbx/plugin.h>. */
        CHECK(sbx_backend_info_get_abi_major(info) == SBX_PLUGIN_ABI_MAJOR &&
                  sbx_backend_info_get_abi_minor(info) == SBX_PLUGIN_ABI_MINOR,
              "oot ABI is %u.%u, expected %u.%u", sbx_backend_info_get_abi_major(info),
              sbx_backend_info_get_abi_minor(info), (unsigned)SBX_PLUGIN_ABI_MAJOR,
              (unsigned)SBX_PLUGIN_ABI_MINOR);
        const char *path = sbx_backend_info_get0_path(info);
        const char *want = getenv("OOT_EXPECT_PATH");
        CHECK(want && strcmp(path, want) == 0, "oot loaded from %s, expected %s", path,
              want ? want : "(OOT_EXPECT_PATH unset)");
    }
    CHECK(found == 1, "oot listed %zu times among %zu plugins, expected once", found, count);
    sbx_backend_info_list_free(list, count);

    sbx_client *client = sbx_client_new("oot", &err);
    if (!client) {
        fprintf(stderr, "load: sbx_client_new(\"oot\"): %s\n", sbx_error_get0_message(err));
        sbx_error_free(err);
        return 1;
    }
    CHECK(strcmp(sbx_client_get0_backend(client), "oot") == 0, "client backend is \"%s\"",
          sbx_client_get0_backend(client));
    uint64_t caps = 0;
    CHECK(sbx_client_probe(client, &caps, &err) == 0, "probe failed: %s",
          err ? sbx_error_get0_message(err) : "no error");
    CHECK(caps == SBX_CAP_LIFETIME, "probe gave caps 0x%llx, expected 0x%llx",
          (unsigned long long)caps, (unsigned long long)SBX_CAP_LIFETIME);
    sbx_error_clear(&err);

    /* No create slot: the host answers feature_not_supported. */
    sbx_sandbox *sb = sbx_sandbox_create(client, NULL, &err);
    CHECK(sb == NULL && err && sbx_error_get_code(err) == SBX_ERROR_FEATURE_NOT_SUPPORTED,
          "create on oot: expected feature_not_supported, got %s",
          sb ? "a sandbox" : err ? sbx_error_code_name(sbx_error_get_code(err)) : "no error");
    sbx_error_clear(&err);
    sbx_client_free(client);
    return failures ? 1 : 0;
}
