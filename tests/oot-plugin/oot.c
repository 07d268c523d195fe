/*
 * tests/oot-plugin/oot.c — a plugin built the way a third party builds one:
 * out of the tree, against the installed SDK header <sbx/plugin.h> alone
 * (`pkg-config --cflags libsbx`), never linking libsbx. tests/test_pkgconfig.sh
 * compiles it into libsbx-oot.so, installs it into the installed plugindir
 * and loads it.
 *
 * It has the slots needed to load and make a client (setup, client_new,
 * client_free, probe) and nothing else: every other call on it is
 * feature_not_supported.
 */
#include <stdlib.h>
#include <string.h>

#include <sbx/plugin.h>

static const sbx_host_services *host;

typedef struct sbx_plugin_client {
    int probes;
} oot_client;

static int oot_setup(const sbx_host_services *services, sbx_error **error)
{
    if (!services || services->struct_size < sizeof(*services)) {
        if (services)
            services->set_error(error, SBX_ERROR_UNKNOWN, "setup", "host services too short");
        return -1;
    }
    host = services;
    return 0;
}

static int oot_client_new(const char *config_json, sbx_plugin_client **client,
                          sbx_error **error)
{
    if (config_json && strcmp(config_json, "{}") != 0) {
        host->set_error(error, SBX_ERROR_CONFIGURATION, "client_new",
                        "oot takes no configuration, got %s", config_json);
        return -1;
    }
    oot_client *c = calloc(1, sizeof(*c));
    if (!c) {
        host->set_error(error, SBX_ERROR_UNKNOWN, "client_new", "out of memory");
        return -1;
    }
    host->log(SBX_LOG_DEBUG, "oot", "client made");
    *client = c;
    return 0;
}

static void oot_client_free(sbx_plugin_client *client)
{
    free(client);
}

/* Reports one declared bit and one undeclared one: the host keeps only what
 * the descriptor declares. */
static int oot_probe(sbx_plugin_client *client, const sbx_call_ctx *ctx, uint64_t *caps,
                     sbx_error **error)
{
    (void)ctx;
    (void)error;
    client->probes++;
    *caps = SBX_CAP_LIFETIME | SBX_CAP_GPU;
    return 0;
}

static const sbx_plugin oot_plugin = {
    .struct_size = sizeof(sbx_plugin),
    .abi_major = SBX_PLUGIN_ABI_MAJOR,
    .abi_minor = SBX_PLUGIN_ABI_MINOR,
    .name = "oot",
    .version = "1.2.3",
    .description = "out-of-tree test plugin",
    .caps = SBX_CAP_LIFETIME,
    .setup = oot_setup,
    .client_new = oot_client_new,
    .client_free = oot_client_free,
    .probe = oot_probe,
};

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void)
{
    return &oot_plugin;
}
