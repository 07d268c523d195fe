/*
 * server/http.h — the HTTP daemon of sbx-server (server/http.c).
 */
#ifndef SBX_SERVER_HTTP_H
#define SBX_SERVER_HTTP_H

#include "server.h"

typedef struct cp_http cp_http;

/* Listens on @host (an IPv4 address) and @port (0: a free port), serving
 * at most @connections connections at once, each on its own thread, which
 * dispatches its requests to cp_dispatch(). NULL with *@err (new string)
 * when it cannot listen. */
cp_http *cp_http_start(cp_server *srv, const char *host, unsigned port, unsigned connections,
                       char **err);
/* The port it bound. */
unsigned cp_http_port(const cp_http *h);
/* Stops taking connections and waits for the requests in flight to be
 * answered, @grace_secs at most; then stops the daemon and frees @h, and
 * returns 0. When requests are still running then (a command or a provider
 * call that outlasts the grace), it leaves the daemon and @h as they are
 * (stopping the daemon would wait for them) and returns their number: the
 * caller is to end the process without them. */
unsigned cp_http_stop(cp_http *h, double grace_secs);

#endif
