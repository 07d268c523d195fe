/*
 * Test-only plugins that each break exactly one of the loader's rules
 * (see <sbx/plugin.h>). One source, built once per BROKEN_* macro:
 *
 *   BROKEN_BADABI     libsbx-badabi.so     abi_major 9
 *   BROKEN_NOSYMBOL   libsbx-nosymbol.so   no sbx_plugin_init symbol
 *   BROKEN_NULLDESC   libsbx-nulldesc.so   sbx_plugin_init returns NULL
 *   BROKEN_SHORTDESC  libsbx-shortdesc.so  struct_size below the ABI 1.0 size
 *   BROKEN_NEWMINOR   libsbx-newminor.so   abi_minor newer than the host's
 *
 * Every other field is valid (the name matches the file), so only the
 * intended check can fail. The loader must refuse them before calling any
 * slot: setup aborts the process if it is ever called.
 */
#include <stddef.h>
#include <stdlib.h>

#include <sbx/plugin.h>

#if defined(BROKEN_BADABI)
#define BROKEN_NAME "badabi"
#define BROKEN_SIZE sizeof(sbx_plugin)
#define BROKEN_MAJOR 9
#define BROKEN_MINOR SBX_PLUGIN_ABI_MINOR
#elif defined(BROKEN_NOSYMBOL)
#define BROKEN_NAME "nosymbol"
#define BROKEN_SIZE sizeof(sbx_plugin)
#define BROKEN_MAJOR SBX_PLUGIN_ABI_MAJOR
#define BROKEN_MINOR SBX_PLUGIN_ABI_MINOR
#elif defined(BROKEN_NULLDESC)
#define BROKEN_NAME "nulldesc"
#define BROKEN_SIZE sizeof(sbx_plugin)
#define BROKEN_MAJOR SBX_PLUGIN_ABI_MAJOR
#define BROKEN_MINOR SBX_PLUGIN_ABI_MINOR
#elif defined(BROKEN_SHORTDESC)
#define BROKEN_NAME "shortdesc"
#define BROKEN_SIZE offsetof(sbx_plugin, setup)
#define BROKEN_MAJOR SBX_PLUGIN_ABI_MAJOR
#define BROKEN_MINOR SBX_PLUGIN_ABI_MINOR
#elif defined(BROKEN_NEWMINOR)
#define BROKEN_NAME "newminor"
#define BROKEN_SIZE sizeof(sbx_plugin)
#define BROKEN_MAJOR SBX_PLUGIN_ABI_MAJOR
#define BROKEN_MINOR (SBX_PLUGIN_ABI_MINOR + 1)
#else
#error "define one of BROKEN_BADABI, BROKEN_NOSYMBOL, BROKEN_NULLDESC, BROKEN_SHORTDESC, BROKEN_NEWMINOR"
#endif

static int broken_setup(const sbx_host_services *host, sbx_error **error)
{
    (void)host;
    (void)error;
    abort(); /* the loader must never get this far */
}

static int broken_client_new(const char *config_json, sbx_plugin_client **client,
                             sbx_error **error)
{
    (void)config_json;
    (void)client;
    (void)error;
    abort();
}

static const sbx_plugin broken_plugin = {
    .struct_size = BROKEN_SIZE,
    .abi_major = BROKEN_MAJOR,
    .abi_minor = BROKEN_MINOR,
    .name = BROKEN_NAME,
    .version = "0.0.1",
    .description = "test plugin that breaks a loader rule (" BROKEN_NAME ")",
    .caps = SBX_CAP_EXEC,
    .setup = broken_setup,
    .client_new = broken_client_new,
};

#if defined(BROKEN_NOSYMBOL)
/* Exports a function, but under another name than sbx_plugin_init. */
SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init_wrong_name(void);

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init_wrong_name(void)
{
    return &broken_plugin;
}
#else
SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void);

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void)
{
#if defined(BROKEN_NULLDESC)
    (void)broken_plugin;
    return NULL;
#else
    return &broken_plugin;
#endif
}
#endif
