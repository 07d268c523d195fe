/*
 * ssh.h — commands in a remote machine over the system's OpenSSH client
 * (ssh(1)), for plugins whose provider gives a host and a port and no exec
 * API of its own (runpod.c).
 *
 *   - One control master per remote (rp_ssh), started as a child of this
 *     process in a session of its own; its socket lives in a private
 *     directory of at most RP_SSH_PATH_MAX bytes of path (CASE-29: OpenSSH
 *     adds 17 bytes while binding it, and sun_path holds 108 with the NUL),
 *     made under $TMPDIR when that is short enough, else under /tmp; when
 *     even that is too long, commands run without multiplexing. The master
 *     is closed (killed by its pid, reaped) by rp_ssh_close(); a janitor
 *     process (a sh reading a pipe this process holds) ends it and removes
 *     the directory when this process ends without closing it. A master that
 *     exited, that is stopped (state T in /proc) or whose socket no longer
 *     answers, is found before each
 *     command (no process is started for the look) and replaced; a
 *     running command looks at its master once a second and ends one that
 *     is stopped (the command then fails as a lost connection), so a dead
 *     or wedged master never hangs a command; a master whose server went
 *     quiet ends by its keepalives (ServerAliveInterval x
 *     ServerAliveCountMax), which also keep a quiet command's connection
 *     busy (CASE-52).
 *   - A command is one ssh process over the master (one round trip when
 *     warm). Its remote command line is a fixed bootstrap: the script
 *     itself (environment values included) travels on the command's stdin
 *     ahead of the caller's bytes, as "LENGTH\n" and LENGTH bytes, so no
 *     value is ever in a command line on either side (CASE-48) and
 *     quoting is exact for any bytes. The script's own exit status 255 is
 *     told apart from ssh's 255 (CASE-31): a script that exits 255 leaves
 *     a marker file named by its tag, which a second call removes; ssh's
 *     255 with no marker is the transport's failure, classified from ssh's
 *     own log (-E, a file in the private directory): connection refused,
 *     host key mismatch, authentication, timeout.
 *   - Host keys are kept per remote, in the private directory's
 *     known_hosts (or a file the caller names), never in the user's
 *     ~/.ssh/known_hosts; the user's ssh_config is not read (-F /dev/null);
 *     no agent and no forwarding.
 *
 * Prefix rp_ssh_. Threading: an rp_ssh is shared by the threads of one
 * sandbox; its master is guarded by its own lock; everything else is
 * thread-safe. Errors: -1 with *error set (cl_fail), the op given by the
 * caller. Ownership: "a new string" is malloc()ed, freed with free().
 */
#ifndef SBX_RUNPOD_SSH_H
#define SBX_RUNPOD_SSH_H

#include "cloud.h"

#include <sys/types.h>

/** The longest control socket path handed to ssh (108 - 1 - 17). */
#define RP_SSH_PATH_MAX 90

/** How to reach a remote. Strings are copied by rp_ssh_new(). */
typedef struct rp_ssh_conf {
    const char *host;           /* IP or name */
    int port;
    const char *user;           /* NULL: "root" */
    const char *key_path;       /* the private key; "~/" is $HOME */
    double connect_timeout_s;   /* ConnectTimeout; <= 0: 10 */
    int keepalive_s;            /* ServerAliveInterval; <= 0: 5 (x 3 tries) */
    const char *strict;         /* StrictHostKeyChecking: "accept-new" (NULL), "yes", "no" */
    const char *known_hosts;    /* a known_hosts file; NULL: the private directory's */
    const char *known_line;     /* a known_hosts line to trust (a resumed remote's
                                 * key); NULL: none */
} rp_ssh_conf;

typedef struct rp_ssh rp_ssh;

/**
 * A new handle for @conf (copied), with its private directory made (mode
 * 0700): NULL with resource_exhausted (no memory, no directory) or
 * configuration (no key file: "ssh_private_key_path PATH: REASON", context
 * option). No process is started.
 */
rp_ssh *rp_ssh_new(const rp_ssh_conf *conf, const char *op, sbx_error **error);

/**
 * Closes the master (SIGTERM, then SIGKILL after 1 s, reaped by its pid)
 * and removes the private directory and all in it; later rp_ssh_master()
 * calls fail (not_found), and commands still running lose their
 * connection. The handle stays valid for threads that still use it.
 * NULL: nothing. Thread-safe.
 */
void rp_ssh_close(rp_ssh *s);

/** rp_ssh_close(), then frees @s: no other thread may use it. NULL:
 *  nothing. */
void rp_ssh_free(rp_ssh *s);

/**
 * Makes sure a master runs: starts one when none does (or the last one
 * exited or is stopped; that one is killed and reaped first) and waits
 * until its socket answers, bounded by @ctx's deadline and the connect
 * timeout plus 5 s. 0 when a master runs (or commands run without one,
 * the socket path being too long); -1 with the transport's error
 * (connection, authentication, timeout; context reason, host and port),
 * and no master process left.
 */
int rp_ssh_master(rp_ssh *s, const sbx_call_ctx *ctx, const char *op, sbx_error **error);

/** The "reason" context value (connection_refused, host_key_mismatch,
 *  permission_denied, connect_timeout, connection_lost, ssh_failed, ...) of
 *  the last transport error made on this thread: borrowed, thread-local,
 *  "" before any. */
const char *rp_ssh_last_reason(void);

/** The first host key line of the private known_hosts ("[host]:port TYPE
 *  KEY"), once a connection trusted it: a new string, or NULL. */
char *rp_ssh_known_line(rp_ssh *s);

/** The pid of the running master, or 0 (tests and logs). */
pid_t rp_ssh_master_pid(rp_ssh *s);

/** The control socket's path (borrowed; "" when commands run without a
 *  master). */
const char *rp_ssh_socket_path(rp_ssh *s);

/** One command. Set what is used, zero the rest. */
typedef struct rp_ssh_cmd {
    const char *script;     /* the POSIX sh script run remotely (any bytes); "$1"
                             * is a private directory of its own, removed
                             * when it ends */
    const char *tag;        /* names its 255 marker: [0-9a-f]+, at most 32 */
    int in_fd;              /* its stdin after the script; -1: EOF at once */
    int out_fd, err_fd;     /* where its stdout and stderr go; -1: to out_buf / err_buf */
    cl_buf *out_buf;        /* when out_fd is -1 (NULL: discarded) */
    cl_buf *err_buf;        /* when err_fd is -1 (NULL: discarded) */
    size_t buf_max;         /* bytes kept in each buffer; 0: 1 MiB */
    int stop_fd;            /* readable: stop (the ssh process is killed); -1 none */
    pid_t *pid_out;         /* when not NULL: the ssh process's pid once started, 0 after */
    int *pidfd_out;         /* when not NULL: a pidfd of it, -1 after (the
                             * caller may signal it while it runs; guarded
                             * by @pid_lock when that is not NULL) */
    pthread_mutex_t *pid_lock;
} rp_ssh_cmd;

/**
 * Runs @cmd on the remote and waits for its end (bounded by @ctx's
 * deadline and cancel descriptor, and cmd->stop_fd). 1 with the script's
 * exit status in *@code (128+N when it ended by signal N); -1 with the
 * transport's error when ssh failed (its 255 with no marker; ssh killed),
 * or a timeout / cancelled error (the ssh process killed and reaped).
 */
int rp_ssh_run(rp_ssh *s, const sbx_call_ctx *ctx, const rp_ssh_cmd *cmd, int *code,
               const char *op, sbx_error **error);

#endif
