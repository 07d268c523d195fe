/*
 * host/slots.h — the one table of plugin slots that drives out-of-process
 * plugin hosting.
 *
 * A row per slot of struct sbx_plugin (sdk/include/sbx/plugin.h):
 *
 *   X(name, RET, rettype, flags, nargs, arg...)
 *
 *   name     the slot's field in sbx_plugin;
 *   RET      how its return value travels (SBX_RET_*);
 *   rettype  its C return type;
 *   flags    SBX_ROW_* (QUICK: never blocks, the plugin host runs it on
 *            its reader thread instead of a worker; QUICK_IF_NO_WAIT: the
 *            same when its INT argument, a wait in milliseconds, is 0;
 *            FREES: frees the handle of its first argument; NO_REPLY: the
 *            caller does not wait for it, the plugin host runs it before
 *            reading the next frame);
 *   nargs    number of arguments (at most SBX_ROW_MAX_ARGS);
 *   arg      (DIR, ENCODER, LEN, ctype) per argument:
 *              DIR     IN (caller to plugin) or OUT (plugin to caller);
 *              ENCODER how the value is carried (SBX_ENC_*);
 *              LEN     the index of the argument holding its length, for
 *                      BYTES; NOLEN otherwise;
 *              ctype   its C type, from which its libffi type follows.
 *
 * The out-of-process proxy (host/proxy.c) generates a function per row with
 * exactly the slot's C signature, which encodes its arguments by the row;
 * the plugin host (host/plugin-host/) decodes them by the same row and calls
 * the plugin's slot through libffi with the row's signature. Adding a slot
 * to the ABI adds one row here and nothing else.
 *
 * The `setup` slot is not in the table: the plugin host calls it itself with
 * its own host services when it loads the plugin.
 */
#ifndef SBX_HOST_SLOTS_H
#define SBX_HOST_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include <sbx/plugin.h>

/* How a slot's return value travels. */
enum {
    SBX_RET_VOID = 0,      /* nothing */
    SBX_RET_INT,           /* int (0 / -1, or is_alive's 1 / 0 / -1) */
    SBX_RET_STR_ALLOC,     /* char * made with host->alloc; NULL = failure */
    SBX_RET_STR_BORROWED,  /* const char * owned by the handle */
    SBX_RET_FD             /* a descriptor the plugin keeps; -1 = none. Only
                            * exec_event_fd: the plugin host sends it along
                            * with each new process handle, so asking for it
                            * costs no round trip */
};

/* How an argument travels. */
enum {
    SBX_ENC_CLIENT = 0,    /* sbx_plugin_client *: the plugin host's handle id */
    SBX_ENC_SANDBOX,       /* sbx_plugin_sandbox *: handle id */
    SBX_ENC_PROCESS,       /* sbx_plugin_process *: handle id */
    SBX_ENC_CTX,           /* const sbx_call_ctx *: deadline and create token;
                            * the cancel descriptor becomes a CANCEL frame */
    SBX_ENC_STR,           /* const char *, NULL kept */
    SBX_ENC_BYTES,         /* const void *, length from argument LEN */
    SBX_ENC_SIZE,          /* size_t */
    SBX_ENC_INT,           /* int */
    SBX_ENC_U32,           /* unsigned / uint32_t */
    SBX_ENC_FD,            /* int descriptor, passed with SCM_RIGHTS */
    SBX_ENC_CREATE_REQ,    /* const sbx_plugin_create_request *, field by field */
    SBX_ENC_EXEC_REQ,      /* const sbx_plugin_exec_request *, its three
                            * descriptors passed with SCM_RIGHTS */
    SBX_ENC_FILE_FN,       /* sbx_plugin_file_fn: each entry comes back as an
                            * ENTRY frame and is handed to the caller's fn */
    SBX_ENC_OWNED_FN,      /* sbx_plugin_owned_fn: the same for list_owned */
    SBX_ENC_USER_DATA,     /* void *: stays with the caller (the fn's data) */
    SBX_ENC_U64,           /* OUT uint64_t * */
    SBX_ENC_INT_OUT,       /* OUT int * */
    SBX_ENC_FILE_INFO,     /* OUT sbx_plugin_file_info *, field by field */
    SBX_ENC_NEW_CLIENT,    /* OUT sbx_plugin_client **: a new handle id */
    SBX_ENC_NEW_SANDBOX,   /* OUT sbx_plugin_sandbox ** */
    SBX_ENC_NEW_PROCESS,   /* OUT sbx_plugin_process ** */
    SBX_ENC_ERROR          /* OUT sbx_error **: code, outcome, backend, op,
                            * message and context, field by field */
};

enum { SBX_DIR_IN = 0, SBX_DIR_OUT = 1 };
#define SBX_NOLEN (-1)

/* Row flags (bits). */
enum {
    SBX_ROW_WORKER = 0,            /* may block: runs on a worker thread */
    SBX_ROW_QUICK = 1,             /* never blocks: runs on the reader thread */
    SBX_ROW_QUICK_IF_NO_WAIT = 2,  /* QUICK when its INT argument (a wait) is 0 */
    SBX_ROW_FREES = 4,             /* frees the handle of its first argument */
    SBX_ROW_QUICK_FREES = 5,
    SBX_ROW_NO_REPLY = 8,          /* void and QUICK: the plugin host runs it in
                                    * order and answers nothing */
    SBX_ROW_QUICK_FREES_NO_REPLY = 13
};

#define SBX_ROW_MAX_ARGS 6

/* clang-format off */
#define SBX_SLOT_TABLE(X)                                                          \
    X(client_new, INT, int, WORKER, 3,                                             \
      (IN, STR, NOLEN, const char *),                                              \
      (OUT, NEW_CLIENT, NOLEN, sbx_plugin_client **),                              \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(client_free, VOID, void, QUICK_FREES, 1,                                     \
      (IN, CLIENT, NOLEN, sbx_plugin_client *))                                    \
    X(probe, INT, int, WORKER, 4,                                                  \
      (IN, CLIENT, NOLEN, sbx_plugin_client *),                                    \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (OUT, U64, NOLEN, uint64_t *),                                               \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(create, INT, int, WORKER, 5,                                                 \
      (IN, CLIENT, NOLEN, sbx_plugin_client *),                                    \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, CREATE_REQ, NOLEN, const sbx_plugin_create_request *),                  \
      (OUT, NEW_SANDBOX, NOLEN, sbx_plugin_sandbox **),                            \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(resume, INT, int, WORKER, 5,                                                 \
      (IN, CLIENT, NOLEN, sbx_plugin_client *),                                    \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, STR, NOLEN, const char *),                                              \
      (OUT, NEW_SANDBOX, NOLEN, sbx_plugin_sandbox **),                            \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(session_state, STR_ALLOC, char *, WORKER, 3,                                 \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(destroy, INT, int, WORKER, 3,                                                \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(is_alive, INT, int, WORKER, 3,                                               \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(sandbox_free, VOID, void, QUICK_FREES_NO_REPLY, 1,                           \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *))                                  \
    X(sandbox_id, STR_BORROWED, const char *, QUICK, 1,                            \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *))                                  \
    X(sandbox_root, STR_BORROWED, const char *, QUICK, 1,                          \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *))                                  \
    X(snapshot, STR_ALLOC, char *, WORKER, 3,                                      \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(exec_start, INT, int, WORKER, 5,                                             \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, EXEC_REQ, NOLEN, const sbx_plugin_exec_request *),                      \
      (OUT, NEW_PROCESS, NOLEN, sbx_plugin_process **),                            \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(exec_write_stdin, INT, int, WORKER, 5,                                       \
      (IN, PROCESS, NOLEN, sbx_plugin_process *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, BYTES, 3, const void *),                                                \
      (IN, SIZE, NOLEN, size_t),                                                   \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(exec_close_stdin, INT, int, WORKER, 3,                                       \
      (IN, PROCESS, NOLEN, sbx_plugin_process *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(exec_wait, INT, int, QUICK_IF_NO_WAIT, 5,                                    \
      (IN, PROCESS, NOLEN, sbx_plugin_process *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, INT, NOLEN, int),                                                       \
      (OUT, INT_OUT, NOLEN, int *),                                                \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(exec_event_fd, FD, int, QUICK, 1,                                            \
      (IN, PROCESS, NOLEN, sbx_plugin_process *))                                  \
    X(exec_kill, INT, int, WORKER, 4,                                              \
      (IN, PROCESS, NOLEN, sbx_plugin_process *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, INT, NOLEN, int),                                                       \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(exec_resize, INT, int, WORKER, 5,                                            \
      (IN, PROCESS, NOLEN, sbx_plugin_process *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, U32, NOLEN, unsigned),                                                  \
      (IN, U32, NOLEN, unsigned),                                                  \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(exec_free, VOID, void, QUICK_FREES_NO_REPLY, 1,                              \
      (IN, PROCESS, NOLEN, sbx_plugin_process *))                                  \
    X(list_files, INT, int, WORKER, 6,                                             \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, STR, NOLEN, const char *),                                              \
      (IN, FILE_FN, NOLEN, sbx_plugin_file_fn),                                    \
      (IN, USER_DATA, NOLEN, void *),                                              \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(read_file, INT, int, WORKER, 5,                                              \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, STR, NOLEN, const char *),                                              \
      (IN, FD, NOLEN, int),                                                        \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(write_file, INT, int, WORKER, 6,                                             \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, STR, NOLEN, const char *),                                              \
      (IN, FD, NOLEN, int),                                                        \
      (IN, U32, NOLEN, uint32_t),                                                  \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(upload_tar, INT, int, WORKER, 5,                                             \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, STR, NOLEN, const char *),                                              \
      (IN, FD, NOLEN, int),                                                        \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(download_tar, INT, int, WORKER, 5,                                           \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, STR, NOLEN, const char *),                                              \
      (IN, FD, NOLEN, int),                                                        \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(stat_file, INT, int, WORKER, 5,                                              \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, STR, NOLEN, const char *),                                              \
      (OUT, FILE_INFO, NOLEN, sbx_plugin_file_info *),                             \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(list_owned, INT, int, WORKER, 5,                                             \
      (IN, CLIENT, NOLEN, sbx_plugin_client *),                                    \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, OWNED_FN, NOLEN, sbx_plugin_owned_fn),                                  \
      (IN, USER_DATA, NOLEN, void *),                                              \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(destroy_by_id, INT, int, WORKER, 4,                                          \
      (IN, CLIENT, NOLEN, sbx_plugin_client *),                                    \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, STR, NOLEN, const char *),                                              \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(detach, INT, int, WORKER, 3,                                                 \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(exec_end_info, INT, int, WORKER, 4,                                          \
      (IN, PROCESS, NOLEN, sbx_plugin_process *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (OUT, U64, NOLEN, uint64_t *),                                               \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(stop, INT, int, WORKER, 3,                                                   \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(start, INT, int, WORKER, 3,                                                  \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(expose_port, INT, int, WORKER, 4,                                            \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, U32, NOLEN, unsigned),                                                  \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(unexpose_port, INT, int, WORKER, 4,                                          \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, U32, NOLEN, unsigned),                                                  \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(resolve_port, STR_ALLOC, char *, WORKER, 4,                                  \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (IN, U32, NOLEN, unsigned),                                                  \
      (OUT, ERROR, NOLEN, sbx_error **))                                           \
    X(list_ports, STR_ALLOC, char *, WORKER, 3,                                    \
      (IN, SANDBOX, NOLEN, sbx_plugin_sandbox *),                                  \
      (IN, CTX, NOLEN, const sbx_call_ctx *),                                      \
      (OUT, ERROR, NOLEN, sbx_error **))
/* clang-format on */

/* Slot numbers, in table order: the wire names a slot by this number. */
#define SBX_SLOT_ENUM_(name, ...) SBX_SLOT_ID_##name,
enum { SBX_SLOT_TABLE(SBX_SLOT_ENUM_) SBX_SLOT_COUNT };

/* ---- argument-list helpers for generating code from a row ---- */

#define SBX_ARG_DIR_(dir, enc, len, type) SBX_DIR_##dir
#define SBX_ARG_ENC_(dir, enc, len, type) SBX_ENC_##enc
#define SBX_ARG_LEN_(dir, enc, len, type) SBX_##len##_
#define SBX_ARG_TYPE_(dir, enc, len, type) type
#define SBX_NOLEN_ SBX_NOLEN
#define SBX_0_ 0
#define SBX_1_ 1
#define SBX_2_ 2
#define SBX_3_ 3
#define SBX_4_ 4
#define SBX_5_ 5

/* SBX_MAP_n(F, a...): F(0, a0), F(1, a1), ... comma-separated. */
#define SBX_MAP_1(F, a) F(0, a)
#define SBX_MAP_2(F, a, b) F(0, a), F(1, b)
#define SBX_MAP_3(F, a, b, c) F(0, a), F(1, b), F(2, c)
#define SBX_MAP_4(F, a, b, c, d) F(0, a), F(1, b), F(2, c), F(3, d)
#define SBX_MAP_5(F, a, b, c, d, e) F(0, a), F(1, b), F(2, c), F(3, d), F(4, e)
#define SBX_MAP_6(F, a, b, c, d, e, f) \
    F(0, a), F(1, b), F(2, c), F(3, d), F(4, e), F(5, f)
#define SBX_MAP(n, F, ...) SBX_MAP_##n(F, __VA_ARGS__)

#define SBX_ROW_DIR_(i, spec) SBX_ARG_DIR_ spec
#define SBX_ROW_ENC_(i, spec) SBX_ARG_ENC_ spec
#define SBX_ROW_LEN_(i, spec) SBX_ARG_LEN_ spec

/** One row, as data both ends read at run time. */
typedef struct sbx_slot_row {
    const char *name;
    size_t offset;                        /* offsetof(sbx_plugin, name) */
    int ret;                              /* SBX_RET_* */
    int flags;                            /* SBX_ROW_* */
    unsigned nargs;
    signed char dir[SBX_ROW_MAX_ARGS];    /* SBX_DIR_* */
    signed char enc[SBX_ROW_MAX_ARGS];    /* SBX_ENC_* */
    signed char len[SBX_ROW_MAX_ARGS];    /* index of the length argument, or SBX_NOLEN */
} sbx_slot_row;

#define SBX_SLOT_ROW_(name, rk, rt, fl, n, ...)                               \
    { #name, offsetof(sbx_plugin, name), SBX_RET_##rk, SBX_ROW_##fl, n,       \
      { SBX_MAP(n, SBX_ROW_DIR_, __VA_ARGS__) },                               \
      { SBX_MAP(n, SBX_ROW_ENC_, __VA_ARGS__) },                               \
      { SBX_MAP(n, SBX_ROW_LEN_, __VA_ARGS__) } },

/** The rows, indexed by SBX_SLOT_ID_*. */
extern const sbx_slot_row sbx_slot_rows[SBX_SLOT_COUNT];

/** The slot function of row @id in descriptor @plugin, or NULL when the
 *  plugin leaves it NULL or its struct_size does not cover it. */
void *sbx_slot_get(const sbx_plugin *plugin, unsigned id);

#endif /* SBX_HOST_SLOTS_H */
