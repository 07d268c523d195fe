/*
 * local.h — what the parts of libsbx-local.so share (local.c: lifecycle
 * and exec; files.c: the file slots).
 */
#ifndef SBX_LOCAL_H
#define SBX_LOCAL_H

#include <sbx/plugin.h>

#include <errno.h>
#include <pthread.h>
#include <sys/types.h>

/** A local sandbox: a root directory plus its supervisor process. After
 *  create, everything but id, meta and sock comes from what create wrote
 *  in meta/record (local.c), never from a session state. */
struct sbx_plugin_sandbox {
    char *id;                   /* basename of meta */
    char *meta;                 /* meta directory */
    char *root;                 /* SANDBOX_ROOT */
    char *sock;                 /* meta/sock */
    char *tmp;                  /* root/tmp */
    char *cwd;                  /* bubblewrap: the sandbox path commands start in
                                 * (the workdir, "/" by default); else NULL */
    pid_t sup_pid;              /* the supervisor, as seen from this host */
    unsigned long long sup_start;
    uid_t sup_uid;              /* its uid (SO_PEERCRED at create) */
    int sup_pidfd1;             /* a pidfd of the supervisor plus one, taken at the
                                 * first local_supervisor_alive (0: none yet; set
                                 * once, atomically, closed by sandbox_free) */
    int owns_root;              /* root is meta/root */
    int made_tmp;               /* root/tmp was created by create */
    char *wrapper;              /* safehouse: the CLI wrapping every command */
    double lifetime;            /* seconds from readiness; 0 = none */
    double expires_at;          /* UNIX seconds the lifetime ends; 0 = none */
    uint16_t *ports;            /* exposed ports, ascending (the record's "ports") */
    size_t n_ports;
    int own_netns;              /* bubblewrap: a network namespace of its own */
    uid_t user_uid;             /* the uid commands have inside the sandbox
                                 * (bubblewrap: the create-time user's, bwrap
                                 * --uid; else sup_uid) */
    gid_t user_gid;             /* its gid there (bwrap --gid) */
    int user_mapped;            /* bubblewrap: a create-time user maps them */
    int spare_hello;            /* bubblewrap, during create: its supervisor is a
                                 * claimed warm sandbox's init, whose HELLO was
                                 * read when the client made it */
    /* And that init's host pid, start time and uid as its HELLO's
     * credentials gave them (spare_pid 0: unknown; READY's check finds
     * them). */
    pid_t spare_pid;
    unsigned long long spare_start;
    uid_t spare_uid;
    int unresponsive;           /* resumed while its supervisor lived but did not
                                 * answer (stopped, or hung): every call that
                                 * asks the supervisor (exec, is_alive, ports,
                                 * detach) is refused as timed out; the file
                                 * calls, done on the root from here, still
                                 * work; destroy ends it by pid without asking.
                                 * Set before the handle is shared, never
                                 * changed. */
    pthread_mutex_t lock;       /* guards destroyed and ports; serialises destroy */
    int destroyed;
    struct fill_gate *fill_gate; /* local.c: the gate the client's next warm
                                 * fill waits at, opened when this sandbox
                                 * is destroyed (a reference; NULL none) */
};

/** local.c: 0 while @sandbox's lifetime lasts; else -1 with a not_found
 *  error of op @op naming its expiry ("sandbox ID expired at T (lifetime
 *  N s)"). Thread-safe. */
int local_check_lifetime(sbx_plugin_sandbox *sandbox, const char *op, sbx_error **error);

/** local.c: 1 while @sandbox's supervisor (sup_pid, started at sup_start) is
 *  alive, else 0. The first call checks /proc/PID/stat and keeps a pidfd
 *  of that process; later calls poll the pidfd (one system call, no /proc
 *  read): a process that has not ended keeps its pid. Without pidfds every
 *  call reads /proc. Thread-safe. */
int local_supervisor_alive(sbx_plugin_sandbox *sandbox);

/** files.c: keeps the host services (called from the plugin's setup). */
void local_files_setup(const sbx_host_services *services);

/* files.c: the file slots (sbx_plugin in <sbx/plugin.h> documents them). */
int local_list_files(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                     const char *path, sbx_plugin_file_fn fn, void *user_data,
                     sbx_error **error);
int local_read_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                    const char *path, int fd, sbx_error **error);
int local_write_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                     const char *path, int fd, uint32_t mode, sbx_error **error);
int local_upload_tar(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                     const char *path, int fd, sbx_error **error);
int local_download_tar(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                       const char *path, int fd, sbx_error **error);
int local_stat_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                    const char *path, sbx_plugin_file_info *info, sbx_error **error);

/**
 * files.c: the host path (a new string in *@out, no symlink and no "..")
 * of directory @path of @sandbox, resolved by the rule of the file slots:
 * beneath the root, ".." above it and symlinks leading out refused. Errors
 * (op @op, context "path" = @path): not_found when it does not exist,
 * invalid_argument when it is not a directory or leads outside the root.
 * Returns 0 or -1. Thread-safe.
 */
int local_resolve_dir(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *op,
                      const char *path, char **out, sbx_error **error);

#ifdef SBX_LOCAL_SAFEHOUSE
/** safehouse.c: the safehouse CLI ($SBX_SAFEHOUSE, else `safehouse` in PATH
 *  on macOS), malloc'd; NULL with a configuration error saying how to
 *  install it (off macOS, without $SBX_SAFEHOUSE, always). */
char *safehouse_find(const char *op, sbx_error **error);
/** Keeps the host services (called from the plugin's setup). */
void safehouse_setup(const sbx_host_services *services);
#endif

#ifdef SBX_LOCAL_BUBBLEWRAP
/* bwrap.c: libsbx-bubblewrap.so's part (bwrap.c describes the sandbox). */

/** Where the supervisor program is inside (its socket is not in view). */
#define BWRAP_SUPERVISOR "/.sbx/sbx-supervisor"
/** The descriptor the launcher puts the seccomp filter on for bwrap. */
#define BWRAP_SECCOMP_FD_STR "4"
/** The host uid and gid a sandbox runs as when the library runs as root. */
#define BWRAP_SANDBOX_UID 65534
#define BWRAP_SANDBOX_GID 65534

/** Keeps the host services (called from the plugin's setup). */
void bwrap_setup(const sbx_host_services *services);
/** The bwrap program ($SBX_BWRAP, else found in PATH), malloc'd; NULL with
 *  a configuration error saying how to install it. */
char *bwrap_find(const char *op, sbx_error **error);
/** Whether sandboxes run as another user than the library: 1 when the
 *  library runs as root (euid 0), with BWRAP_SANDBOX_UID/GID in @uid and
 *  @gid (either may be NULL); 0 otherwise (the sandbox's uid is the
 *  library's). Thread-safe. */
int bwrap_sandbox_ids(uid_t *uid, gid_t *gid);
/** Runs `bwrap --unshare-user --disable-userns --cap-drop ALL --ro-bind / /
 *  true` as the sandbox's user (bwrap_sandbox_ids); 0 when it works, else
 *  -1 with a configuration error quoting bwrap's message. */
int bwrap_check_userns(const char *bwrap, const char *op, sbx_error **error);
/** SBX_CAP_MEMORY_LIMIT / SBX_CAP_CPU_LIMIT when this process may create
 *  the cgroups that enforce them. */
uint64_t bwrap_limit_caps(void);
/** Creates the cgroups sandbox @id needs for the limits @request set
 *  (with @make; without, only checks that they can be and names them);
 *  puts their cgroup.procs paths (malloc'd, at most 2) in @procs. -1 with
 *  a configuration error when a limit cannot be enforced (nothing left). */
int bwrap_cgroups_create(const char *id, const sbx_plugin_create_request *request, int make,
                         char **procs, size_t *nprocs, const char *op, sbx_error **error);
/** Removes the cgroups of sandbox @id, if any. */
void bwrap_cgroups_remove(const char *id);
/** 1 when sandbox @id may have a cgroup (one of its directories exists,
 *  or cannot be looked at), else 0. */
int bwrap_cgroups_exist(const char *id);
/** Stores in *@count how many processes the memory limit of sandbox @id
 *  has killed so far (its memory cgroup's oom_kill counter: v2
 *  memory.events, v1 memory.oom_control). 0, or -1 when the sandbox has
 *  no memory cgroup (no memory_mb) or the counter cannot be read. */
int bwrap_oom_kills(const char *id, uint64_t *count);
/** The launcher's argv (NULL-terminated, free with bwrap_argv_free), or
 *  NULL with an error. @root: META/root, or the root_dir the caller gave.
 *  @src: "/" or the image's root filesystem. @remove (may be NULL): the tmp/
 *  of a caller's root_dir, which the launcher makes when missing and its
 *  keeper then removes with META when the sandbox ends on its own. @backend_options (may
 *  be NULL): a JSON object of "ro_binds" (["/HOST/PATH",...], host paths
 *  bound read-only at the same path inside) and "root_dir" (read by
 *  bwrap_root_dir); any other key is a configuration error naming it
 *  (context "name"), a malformed value an invalid_argument error. The
 *  launcher makes META itself (--make-keep: launch() in supervisor.c).
 *  @spare_id (NULL for a cold start): a warm sandbox's, named ID once a
 *  create claims it (META renamed to DIR/ID): its init waits for CONFIG
 *  with no time limit (`--init --spare=ID`), and no command line of it
 *  names META (the launcher's `--spare-id=ID`, bwrap's root bind on
 *  PROTO_ROOT_ARGS_FD). */
char **bwrap_argv(const char *launcher, char *const *procs, size_t nprocs, const char *bwrap,
                  const char *supervisor, const char *root, const char *meta, const char *src,
                  const char *remove, int allow_internet, const char *backend_options,
                  const uid_t *in_uid, const gid_t *in_gid, const char *spare_id,
                  const char *op, sbx_error **error);
/**
 * The uid and gid the sandbox's processes have inside its user namespace
 * for the create-time user @user (bwrap --uid/--gid): a number is that uid,
 * a name is looked up in @passwd (the sandbox's /etc/passwd: SRC/etc/passwd
 * at create, /proc/PID/root/etc/passwd later); the gid is the passwd
 * entry's, else the uid. Returns 0, or -1 with a configuration error
 * naming the user (context user) when a name is not in @passwd or @user is
 * neither a name nor a uid (op @op); with @error NULL, just -1.
 */
int bwrap_resolve_user(const char *passwd, const char *user, uid_t *uid, gid_t *gid,
                       const char *op, sbx_error **error);
void bwrap_argv_free(char **argv);
/** The keys bwrap_argv and bwrap_root_dir know, for messages. */
#define BWRAP_OPTION_KEYS "\"ro_binds\", \"root_dir\""
/** backend_options' "root_dir" (may be absent: 0 and *@out NULL): the
 *  host directory that becomes the sandbox's "/" (its real path, malloc'd,
 *  in *@out). It must be an existing absolute directory, and never a
 *  system directory: /, /usr, /etc, /bin, /sbin, /lib*, /var (and its lib,
 *  log, cache, tmp), /proc, /sys, /dev, /boot, /home, /root, /run, /tmp,
 *  /opt, /srv, /mnt, /media, nor anything beneath /usr, /etc, /bin, /sbin,
 *  /lib*, /proc, /sys, /dev, /boot, /run: an invalid_argument error naming
 *  the refused path (context "option" = "root_dir", "path"). Thread-safe. */
int bwrap_root_dir(const char *backend_options, char **out, const char *op,
                   sbx_error **error);
/** The workdir @workdir (a sandbox path) checked and in normal form (a new
 *  string in *@out: absolute, single slashes, no "." and no trailing
 *  slash). Relative paths and ".." are invalid_argument; so is a path in
 *  what bwrap mounts (the system tree bound from @src, "/" or an image)
 *  that does not exist there, and one in /proc, /dev or /.sbx, each naming
 *  it (context "option" = "workdir", "path"). Thread-safe. */
int bwrap_check_workdir(const char *workdir, const char *src, char **out, const char *op,
                        sbx_error **error);
/** Makes the normal-form @workdir (bwrap_check_workdir) beneath the host
 *  directory @root (the sandbox's "/" before it starts) when missing, as
 *  the sandbox's user (bwrap_sandbox_ids), never through a symlink leading
 *  out. *@made: the host path of the first directory it made (malloc'd;
 *  NULL when the workdir existed), for create to remove when it fails.
 *  0, or -1 with an error naming the workdir (nothing made left). */
int bwrap_make_workdir(const char *root, const char *workdir, char **made, const char *op,
                       sbx_error **error);
/** When the sandbox runs as another user (bwrap_sandbox_ids): 0 when it
 *  may search every directory above @path (bwrap, running as that user,
 *  binds @path), else -1 with a configuration error naming @what ("the
 *  supervisor", ...) and the directory that stops it. 0 when the sandbox
 *  runs as the library's user. */
int bwrap_check_reach(const char *path, const char *what, const char *op, sbx_error **error);
/** Not thread-safe for one sandbox (create calls it once, before the
 *  sandbox exists for anyone else). When the sandbox runs as another user
 *  (bwrap_sandbox_ids): makes @meta
 *  mode 0711, gives META/run, @root and (when create made it) @tmp to the
 *  sandbox's user; a caller's workdir (@owns_root 0) is lent, its owner
 *  recorded in META/workdir-owner. 0, or -1 with a creation_failed error
 *  naming the path. */
int bwrap_prepare_dirs(const char *meta, const char *root, int owns_root, const char *tmp,
                       int made_tmp, const char *op, sbx_error **error);
/** Gives a lent workdir @root back to the owner META/workdir-owner
 *  recorded (a file this library wrote; only while @root is still the
 *  sandbox user's). Nothing when nothing was lent. */
void bwrap_return_workdir(const char *meta, const char *root);
/** write_file and upload_tar as the sandbox's user (the thread's
 *  filesystem uid and gid, for the call), so what they create is its.
 *  Arguments, results and errors as local_write_file/local_upload_tar;
 *  an unknown error when the ids cannot be changed. Thread-safe: the ids
 *  change on the calling thread only and are restored before returning. */
int bwrap_write_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                     int fd, uint32_t mode, sbx_error **error);
int bwrap_upload_tar(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                     int fd, sbx_error **error);
/** Removes from a caller's workdir the mount points bwrap made in it. */
void bwrap_clean_root(const char *root);
#endif

/** The code of a failure with errno @e of a call that makes a resource
 *  (descriptor, socket, connection, process): resource_exhausted when the
 *  machine or the process ran out (EMFILE, ENFILE, ENOMEM, ENOBUFS,
 *  EAGAIN), as the API documents that code; @otherwise else. */
static inline sbx_error_code local_errno_code(int e, sbx_error_code otherwise)
{
    return e == EMFILE || e == ENFILE || e == ENOMEM || e == ENOBUFS || e == EAGAIN
               ? SBX_ERROR_RESOURCE_EXHAUSTED : otherwise;
}

#endif /* SBX_LOCAL_H */
