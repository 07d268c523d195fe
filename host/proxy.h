/*
 * host/proxy.h — the out-of-process proxy (host/proxy.c): a plugin
 * descriptor whose slots run in an sbx-plugin-host process.
 */
#ifndef SBX_HOST_PROXY_H
#define SBX_HOST_PROXY_H

#include "internal.h"

struct proxy_client;

/**
 * Starts an sbx-plugin-host for @backend, checks the wire version, loads
 * the plugin there and makes its client with @config_json (may be NULL).
 * On success stores a descriptor with the plugin's facts and a proxy for
 * each slot it has (valid until the client is freed through its
 * client_free slot) and the client handle. Returns 0, or -1 with *@err set:
 * configuration (no host program, or the plugin cannot be used: the
 * loader's error as the host reported it, field by field),
 * backend_not_installed, connection (the host died before it was ready,
 * naming the signal), or the plugin's client_new error.
 */
int sbx_proxy_open(const char *backend, const char *config_json, const sbx_plugin **plugin,
                   sbx_plugin_client **client, sbx_error **err);

/** Seconds after which a call on @client (made by sbx_proxy_open) is
 *  cancelled when the call context has no earlier deadline; 0 = none. */
void sbx_proxy_set_call_timeout(sbx_plugin_client *client, double secs);

/** The pid of @client's plugin host, or 0 while none runs. */
int sbx_proxy_host_pid(sbx_plugin_client *client);

/**
 * Sends the destroy of @sandbox (a handle of a proxy client) to its plugin
 * host without waiting for the answer, which whoever reads the host's
 * socket next drops: for a sandbox libsbx already ended through its exec
 * endpoint (direct.c), whose plugin still holds what it keeps of it (the
 * host finds it ended, removes what is left, and frees its handle when the
 * application's free came meanwhile). 0 when sent, -1 when its host is
 * gone (nothing of it is left to tell).
 */
int sbx_proxy_destroy_unwaited(sbx_plugin_sandbox *sandbox);

/** Sends one call of slot @slot with arguments @av (pointers to each
 *  argument, as the generated proxies make them) on @pc's current host;
 *  stores the return value in @ret. Internal to proxy.c's machinery. */
void sbx_proxy_invoke_on(struct proxy_client *pc, unsigned slot, void **av, void *ret);

#endif /* SBX_HOST_PROXY_H */
