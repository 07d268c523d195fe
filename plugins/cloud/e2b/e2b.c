/*
 * e2b.c — libsbx-e2b.so, the `e2b` backend, over the hosted-provider base
 * (plugins/cloud/base/cloud.h).
 */
#include "cloud.h"

#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

#define E2B_BACKEND "e2b"

struct sbx_plugin_client {
    cl_http *http;
};

static int e2b_setup(const sbx_host_services *host, sbx_error **error)
{
    return cl_setup(host, E2B_BACKEND, error);
}

static int e2b_client_new(const char *config_json, sbx_plugin_client **client, sbx_error **error)
{
    struct sbx_plugin_client *c = calloc(1, sizeof(*c));
    if (!c || !(c->http = cl_http_new())) {
        free(c);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
        return -1;
    }
    *client = c;
    return 0;
}

static void e2b_client_free(sbx_plugin_client *c)
{
    if (!c)
        return;
    cl_http_free(c->http);
    free(c);
}

static const sbx_plugin e2b_plugin = {
    .struct_size = sizeof(sbx_plugin),
    .abi_major = SBX_PLUGIN_ABI_MAJOR,
    .abi_minor = SBX_PLUGIN_ABI_MINOR,
    .name = E2B_BACKEND,
    .version = PACKAGE_VERSION,
    .description = "E2B sandboxes (REST API and envd's Connect protocol)",
    .caps = 0,
    .setup = e2b_setup,
    .client_new = e2b_client_new,
    .client_free = e2b_client_free,
};

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void);

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void)
{
    return &e2b_plugin;
}
