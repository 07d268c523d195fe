/*
 * Faults on purpose, for the out-of-process plugin host's tests.
 *
 * Built into libsbx-faulty.so: the local plugin's sources with
 * SBX_LOCAL_FAULTY, whose exec_start first asks sbx_fault_exec() about the
 * command. argv[0] chooses the fault:
 *
 *   sbx-fault-crash  the plugin dies of SIGSEGV inside the slot
 *   sbx-fault-hang   the slot never returns and ignores its cancel descriptor
 *   sbx-fault-slow   the slot waits until its cancel descriptor fires (or its
 *                    deadline passes) and then fails with a timeout error
 *   sbx-fault-unknown  the slot fails with SBX_ERROR_UNKNOWN
 *   sbx-fault-silent   the slot fails without storing an error
 * Any other command runs as on local, so the whole conformance suite passes
 * on "faulty" too. The file slots that move data out of the sandbox
 * (read_file, download_tar) ask sbx_fault_path() about the sandbox path:
 * one whose last component is sbx-fault-hang or sbx-fault-slow behaves as
 * the command of that name (a transfer that blocks). Both blocking faults
 * create the file named by $SBX_FAULT_STARTED (when set) as they begin. While the file named by $SBX_FAULT_HANG_INIT exists,
 * sbx_plugin_init never returns (a plugin that hangs while loading).
 *
 * A create that takes time after the provider made something: with
 * $SBX_FAULT_CREATE_HOLD naming a directory, create makes the file
 * HOLD/SANDBOX_ID there once the sandbox exists (what a provider made:
 * a container, a pod), creates $SBX_FAULT_STARTED, and then waits up to
 * 3 s for its cancel descriptor. Cancelled, it removes the file and fails
 * (as a create that cleans up after itself); with $SBX_FAULT_CREATE_DEAF
 * set it ignores the cancel, waits 1.5 s and returns the sandbox. destroy
 * removes HOLD/SANDBOX_ID: a file left there is a sandbox nobody ended.
 * With $SBX_FAULT_DESTROY_DEAF set to S seconds, a destroy that ended the
 * sandbox creates $SBX_FAULT_STARTED and waits S seconds, deaf to its
 * cancellation, before it returns success (a provider's delete that
 * finishes whatever the caller does).
 *
 * Built alone into libsbx-crashinit.so (FAULT_CRASH_INIT): sbx_plugin_init
 * itself dies of SIGSEGV, so loading the plugin kills the process that
 * loads it.
 */
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sbx/plugin.h>

/* What fault_named() returns for the failing faults (1: a timeout). */
#define SBX_FAULT_UNKNOWN 2
#define SBX_FAULT_SILENT 3

/* Dies of SIGSEGV as a bad pointer would, without undefined behaviour and
 * whatever handler a sanitizer runtime installed. */
static void crash(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &sa, NULL);
    raise(SIGSEGV);
}

#ifdef FAULT_CRASH_INIT

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void);

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void)
{
    crash();
    return NULL;
}

#else

int sbx_fault_exec(const sbx_plugin_exec_request *request, const sbx_call_ctx *ctx);
int sbx_fault_path(const char *path, const sbx_call_ctx *ctx);
void sbx_fault_init(void);
int sbx_fault_create(const char *id, const sbx_call_ctx *ctx);
void sbx_fault_destroy(const char *id);
void sbx_fault_destroyed(void);

/*
 * Called from sbx_plugin_init: hangs for good while the file named by
 * SBX_FAULT_HANG_INIT exists (a plugin that never finishes loading).
 */
void sbx_fault_init(void)
{
    const char *marker = getenv("SBX_FAULT_HANG_INIT");

    while (marker && *marker && access(marker, F_OK) == 0)
        pause();
}

static double monotonic_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* HOLD/@id, malloc'd; NULL without $SBX_FAULT_CREATE_HOLD. */
static char *hold_path(const char *id)
{
    const char *dir = getenv("SBX_FAULT_CREATE_HOLD");
    size_t n;
    char *p;

    if (!dir || !*dir || !id)
        return NULL;
    n = strlen(dir) + strlen(id) + 2;
    p = malloc(n);
    if (p) {
        strcpy(p, dir);
        strcat(p, "/");
        strcat(p, id);
    }
    return p;
}

static void touch(const char *path)
{
    int fd = path && *path ? open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600) : -1;

    if (fd >= 0)
        close(fd);
}

/*
 * Called by create once sandbox @id exists: 0 to return it, -1 when the
 * create was cancelled (HOLD/@id removed; the caller cleans up and fails).
 */
int sbx_fault_create(const char *id, const sbx_call_ctx *ctx)
{
    char *hold = hold_path(id);
    double until = monotonic_now() + 3.0;
    int rc = 0;

    if (!hold)
        return 0;
    touch(hold);
    touch(getenv("SBX_FAULT_STARTED"));
    if (getenv("SBX_FAULT_CREATE_DEAF")) {
        struct timespec ts = { 1, 500000000L };

        while (nanosleep(&ts, &ts) < 0)
            ;
        free(hold);
        return 0;
    }
    while (monotonic_now() < until) {
        struct pollfd p = { ctx ? ctx->cancel_fd : -1, POLLIN, 0 };

        if (poll(&p, 1, 50) > 0 && (p.revents & POLLIN)) {
            unlink(hold);
            rc = -1;
            break;
        }
    }
    free(hold);
    return rc;
}

/* Called by a destroy that ended its sandbox, before it returns. */
void sbx_fault_destroyed(void)
{
    const char *deaf = getenv("SBX_FAULT_DESTROY_DEAF");

    if (deaf && *deaf) {
        double s = strtod(deaf, NULL);
        struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

        touch(getenv("SBX_FAULT_STARTED"));
        while (nanosleep(&ts, &ts) < 0)
            ;
    }
}

/* Called by destroy: what create made for @id goes. */
void sbx_fault_destroy(const char *id)
{
    char *hold = hold_path(id);


    if (hold)
        unlink(hold);
    free(hold);
}

/*
 * 0: run the command as usual; 1: the call was cancelled (the caller fails
 * it with a timeout error). The crash and hang faults never return.
 */
static int fault_named(const char *cmd, const sbx_call_ctx *ctx);

int sbx_fault_exec(const sbx_plugin_exec_request *request, const sbx_call_ctx *ctx)
{
    return fault_named(request->argv ? request->argv[0] : NULL, ctx);
}

/* The fault named by the last component of sandbox path @path. */
int sbx_fault_path(const char *path, const sbx_call_ctx *ctx)
{
    const char *last = path ? strrchr(path, '/') : NULL;

    return fault_named(last ? last + 1 : path, ctx);
}

static int fault_named(const char *cmd, const sbx_call_ctx *ctx)
{
    const char *started = getenv("SBX_FAULT_STARTED");

    if (!cmd)
        return 0;
    /* A blocking fault announces that it began: the file named by
     * $SBX_FAULT_STARTED is created. */
    if (started && *started &&
        (strcmp(cmd, "sbx-fault-hang") == 0 || strcmp(cmd, "sbx-fault-slow") == 0)) {
        int fd = open(started, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);

        if (fd >= 0)
            close(fd);
    }
    if (strcmp(cmd, "sbx-fault-crash") == 0)
        crash();
    if (strcmp(cmd, "sbx-fault-unknown") == 0)
        return SBX_FAULT_UNKNOWN;
    if (strcmp(cmd, "sbx-fault-silent") == 0)
        return SBX_FAULT_SILENT;
    if (strcmp(cmd, "sbx-fault-hang") == 0) {
        for (;;)
            pause();
    }
    if (strcmp(cmd, "sbx-fault-slow") == 0) {
        for (;;) {
            struct pollfd p = { ctx ? ctx->cancel_fd : -1, POLLIN, 0 };
            double now = monotonic_now();
            int ms = 100;

            if (ctx && ctx->deadline > 0 && now >= ctx->deadline + 0.05)
                return 1;
            if (poll(&p, 1, ms) > 0 && (p.revents & POLLIN))
                return 1;
        }
    }
    return 0;
}

#endif
