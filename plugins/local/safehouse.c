/*
 * safehouse.c — what libsbx-safehouse.so adds to the local backend.
 *
 * libsbx-safehouse.so is local.c, files.c and this file built with
 * SBX_LOCAL_SAFEHOUSE: a local sandbox whose every command runs as
 *
 *     SAFEHOUSE --workdir=ROOT --env -- COMMAND...
 *
 * (Agent Safehouse: macOS sandbox-exec confining the command to ROOT, with
 * the sandbox's environment passed through). The CLI is $SBX_SAFEHOUSE when
 * set (any platform: e.g. a stand-in for tests), else `safehouse` found in
 * PATH on macOS. Elsewhere, or without the CLI, create, resume and probe
 * fail with a configuration error saying how to install it.
 */
#include "local.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#define INSTALL_HINT "on macOS: brew install eugene1g/safehouse/agent-safehouse"

static const sbx_host_services *host;

void safehouse_setup(const sbx_host_services *services)
{
    host = services;
}

static void sfail(sbx_error **error, const char *op, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void sfail(sbx_error **error, const char *op, const char *path, const char *fmt, ...)
{
    if (!error || *error || !host)
        return;
    char msg[PATH_MAX + 512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    host->set_error(error, SBX_ERROR_CONFIGURATION, op, "%s", msg);
    if (path && *error && host->error_add_context)
        host->error_add_context(*error, "path", path);
}

static int is_program(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

char *safehouse_find(const char *op, sbx_error **error)
{
    const char *p = getenv("SBX_SAFEHOUSE");
    if (p && *p) {
        if (p[0] == '/' && is_program(p))
            return strdup(p);
        sfail(error, op, p, "safehouse backend: SBX_SAFEHOUSE=%s is not an executable "
              "program given by absolute path (install the safehouse CLI, " INSTALL_HINT ")",
              p);
        return NULL;
    }
#ifdef __APPLE__
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin";
    for (const char *s = path; *s;) {
        const char *e = strchr(s, ':');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char *cand;
        if (len > 0 && s[0] == '/' && asprintf(&cand, "%.*s/safehouse", (int)len, s) >= 0) {
            if (is_program(cand))
                return cand;
            free(cand);
        }
        s += len;
        if (*s == ':')
            s++;
    }
    sfail(error, op, NULL, "safehouse backend: the safehouse CLI was not found in PATH; "
          "install it (" INSTALL_HINT ") or set SBX_SAFEHOUSE");
#else
    sfail(error, op, NULL, "safehouse backend needs macOS (sandbox-exec) and the safehouse "
          "CLI (" INSTALL_HINT "); on Linux use the bubblewrap backend, or set "
          "SBX_SAFEHOUSE to a compatible CLI");
#endif
    return NULL;
}
