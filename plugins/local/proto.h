/*
 * proto.h — the wire protocol between libsbx-local.so and sbx-supervisor.
 *
 * Both ends run on one host from one build, so integers travel in host
 * byte order. A frame is a fixed header followed by its payload:
 *
 *     u32 type | u32 payload length | payload
 *
 * A payload is a sequence of fields: u32, i32 and u64 are raw integers; a
 * string is its u32 length, its bytes and a NUL (so it is binary-safe
 * except for NUL, which no argv, env or path may hold, and can be used in
 * place). No frame is larger than PROTO_MAX_FRAME; a reader refuses
 * anything bigger before allocating.
 *
 * The plugin starts the supervisor as
 * `sbx-supervisor --control-fd=3 --sandbox-dir=DIR [--remove=PATH]` (DIR:
 * the sandbox's meta directory; the socket is DIR/sock; a DIR ending in
 * XXXXXX is a template the supervisor makes the directory from, mkdtemp,
 * before its keeper forks it, and names in HELLO: so no directory is ever
 * made that nothing would remove should the plugin's process die), or inside
 * bubblewrap as `sbx-supervisor --control-fd=3 --init` (no path of the host
 * in view), and handshakes on the control socketpair it hands over as
 * descriptor 3. Warm supervisors (spares) come from a warm spawner,
 * started once per client as `sbx-supervisor --control-fd=3 --warm PAD`
 * (PAD: PROTO_WARM_PAD spaces, room for the directory on the command line
 * its forks inherit), which keeps one warm supervisor forked ahead and
 * hands it over at each request, forking the next one as it answers,
 * until its control socket closes:
 *
 *     plugin     -> FORK     str BASE: the directory meta directories go in
 *                            (absolute)
 *     spawner    -> FORKED   (empty), with the plugin's end of a warm
 *                            supervisor's control socket as SCM_RIGHTS: the
 *                            one it kept ready when that one was made in
 *                            BASE and it and its keeper are still there
 *                            (its HELLO may have been sent already), else
 *                            a fresh one's; or
 *                            ERROR
 *
 * At EOF on its control socket the spawner closes its ready one's socket,
 * waits until that one's keeper has removed its directory, and exits, so
 * that the plugin, which waits for the spawner's EOF in turn, leaves
 * nothing behind when it closes it.
 *
 * A warm supervisor makes, before anything else, everything of a sandbox
 * that does not depend on its request, so that a create is a hand-off:
 * its meta directory BASE/PROTO_SPARE_PREFIX XXXXXX (mkdtemp, mode 0700),
 * the root root/ and its tmp/ in it (0700), and the sandbox's socket
 * sock there, bound (mode 0600) and listening. Then it says HELLO (below,
 * with that directory) and waits with no time limit for its sandbox; it
 * ends when the control socket closes first, and its keeper removes the
 * directory. The plugin checks who listens on the socket before the
 * spare is taken (SO_PEERCRED: the pid HELLO named; the uid). A create
 * that takes it:
 *
 *     plugin     -> CLAIM    str DIR, str PATH ("" = none), and at once,
 *                            without waiting, CONFIG (below), with only the
 *                            owner's pidfd riding along (the socket is the
 *                            supervisor's own). DIR: the sandbox's meta
 *                            directory, in BASE, to which the supervisor
 *                            renames its directory (never over an existing
 *                            one) after its keeper learnt DIR and PATH
 *                            (as the two options of a cold start). PATH,
 *                            the tmp/ of a caller's workdir, is made by
 *                            the supervisor when missing (then its keeper
 *                            learns it; one that exists is left alone);
 *     supervisor -> READY (u32 made: 1 when it made PATH) | ERROR, once
 *                            DIR is in place
 *
 * A cold start handshakes so:
 *
 *     supervisor -> HELLO    u32 version, i32 pid, u64 start time, str
 *                            directory (a warm supervisor's, or the one a
 *                            cold start made from DIR's template; ""
 *                            otherwise), u32 made (1: a cold start made
 *                            --remove's PATH, missing until then, before
 *                            its keeper forked; 0: PATH existed, and is
 *                            left alone, or none); or ERROR when either
 *                            could not be made
 *     plugin     -> CONFIG   str root, u32 n, n x str "K=V" (base env),
 *                            u64 lifetime (ms; 0 = none), u32 detached;
 *                            with its first byte, as SCM_RIGHTS, the
 *                            sandbox's socket (bound at DIR/sock by the
 *                            plugin, not listening yet), an O_PATH
 *                            descriptor of that socket file and, unless
 *                            detached, a pidfd of the owning process
 *     supervisor -> READY (u32 made, as HELLO's) | ERROR
 *
 * Lifetime and owners. The lifetime counts from READY: at its end (and a
 * grace of 1 s for an exec timing out at it) the supervisor ends the
 * sandbox (every process) on its own. So it does when
 * the last of its owners (pidfds: the creator's, and each resumer's, see
 * OWN) has ended, unless the sandbox is detached (CONFIG, or DETACH later),
 * and on SIGTERM, SIGINT or SIGHUP. Ending on its own it exits
 * PROTO_EXIT_SELF_END; after DESTROY it exits 0.
 *
 * The keeper. Outside bubblewrap the supervisor is the child of a keeper,
 * a forked copy of the first process, which waits for it and, unless it
 * exited 0 (DESTROY: the library removes what is left), removes DIR and
 * the --remove PATH (a tmp directory create made in a caller's workdir):
 * so nothing stays on disk after an expiry, the owners' end or a SIGKILL
 * of the supervisor. A warm supervisor's keeper made its directory (before
 * forking it) and removes that too: a spare that ends unclaimed (its
 * client freed, the process holding it gone, a SIGKILL) leaves nothing. The bubblewrap launcher keeps the same way (its
 * keeper waits for bwrap, outside every namespace; supervisor.c).
 *
 * The supervisor calls listen() itself, so SO_PEERCRED of a connection
 * names it (pid and uid); the plugin checks that on every connection. No
 * path to the socket is ever in a bubblewrap sandbox's view, and the
 * supervisor is not dumpable (no process of the sandbox can take its
 * descriptors).
 *
 * Requests, one connection per request on the sandbox's unix socket:
 *
 *     EXEC    u32 argc, argc x str, u32 envc, envc x str "K=V" (overlay),
 *             str cwd (host path), and optionally u32 tty_rows, u32
 *             tty_cols, u32 tty_flags (PROTO_TTY_*; rows 0 = no terminal),
 *             and optionally u64 start_by (the two told apart by the bytes
 *             left after cwd: 0, 8 start_by, 12 the terminal, 20 both);
 *             stdin, stdout and stderr ride along as SCM_RIGHTS with the
 *             first byte of the frame. start_by (CLOCK_MONOTONIC
 *             nanoseconds; absent or 0: none) is when the caller stops
 *             waiting for the command to start (its timeout's end): a
 *             request the supervisor has read whole only at or after it is
 *             refused, ERROR PROTO_ERR_DEADLINE, and nothing starts, so a
 *             command a caller gave up on (a supervisor stopped, SIGSTOP, or
 *             starved meanwhile) never runs later. Caller and supervisor
 *             share CLOCK_MONOTONIC (bubblewrap makes no time namespace).
 *             A caller may tell from its socket that the supervisor has not
 *             read the request whole yet (proto_unread_bytes): at or after
 *             start_by that means the command never runs. With a terminal
 *             the supervisor makes a pseudo-terminal (inside the sandbox,
 *             where it runs), the command gets its slave as stdin, stdout,
 *             stderr and controlling terminal, its bytes go to stdout,
 *             stdin's bytes to it; stderr is closed at once.
 *             <- STARTED i32 pid, later EXIT i32 code; or ERROR.
 *     EXEC_QUIET  the same as EXEC without a terminal, for a caller that
 *             waits for the end only: no STARTED comes
 *             <- EXIT i32 code; or ERROR when nothing could start.
 *             A fourth descriptor may ride along, the caller's exit socket
 *             (SBX_PLUGIN_EXEC_EXIT_FD): right after EXIT the same code
 *             goes there too as an sbx_plugin_exit_record; it is closed
 *             without one when the EXIT comes otherwise (a killed exec's,
 *             sent once its tree is gone) or nothing could start.
 *     RESIZE  u32 rows, u32 cols, on an EXEC connection with a terminal
 *             <- RESIZED i32 errno (0: the size is set, SIGWINCH sent to the
 *             terminal's foreground process group)
 *     KILL    i32 signal, on an EXEC connection  <- KILLED, once the signal
 *             went to the command's whole tree (for SIGKILL: once nothing of
 *             it is left, within a bound). A connection closed before EXIT
 *             kills the tree too. A caller whose KILL (or RESIZE) is not
 *             answered within PROTO_ANSWER_SECS while the supervisor is
 *             stopped, or stays unread (proto_unread_bytes) for its whole
 *             bound, takes the supervisor as not answering: it fails with a
 *             timeout error naming the sandbox and saying whether the command
 *             started, and closes the connection without waiting further;
 *             once the supervisor runs again it reads the close and ends the
 *             tree (a request it reads after its start_by starts nothing).
 *     PING                                        <- PONG u32 version
 *     DESTROY                                     <- DESTROYED, then EOF
 *             DESTROYED comes once the --remove PATH (CLAIM's PATH) is
 *             removed and every process the sandbox's commands
 *             started has ended (idle exec reapers, copies of the
 *             supervisor that run nothing, may have been sent SIGKILL
 *             only: the supervisor reaps them after answering) and,
 *             outside bubblewrap, DIR was renamed to its trash name
 *             (DIR's parent/PROTO_TRASH_PREFIX + DIR's name): the caller
 *             may return then. The supervisor removes the trash after the
 *             answer and exits; should it die first, its keeper removes
 *             the trash, and a trash older than PROTO_TRASH_STALE_SECS
 *             goes at the next sweep (the plugin's, once per client).
 *     OWN     a pidfd of a new owner as SCM_RIGHTS <- OWNED (a detached
 *             sandbox closes it at once: owners do not matter to it)
 *     DETACH                                      <- DETACHED; from then
 *             on only the lifetime and DESTROY end the sandbox
 *
 * ERROR carries u32 kind (PROTO_ERR_*), i32 errno and str message.
 */
#ifndef SBX_LOCAL_PROTO_H
#define SBX_LOCAL_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** Bumped whenever a frame changes shape. */
#define PROTO_VERSION 9u

/** The supervisor's exit status when it ended the sandbox on its own
 *  (lifetime, owners gone, a signal); 0 after DESTROY. */
#define PROTO_EXIT_SELF_END 3

/** The supervisor's exit status after DESTROY when it could not remove
 *  the trash: its keeper removes the trash only (the library removed the
 *  rest, and a caller's workdir may already serve another sandbox). */
#define PROTO_EXIT_TRASH_LEFT 4

/** The descriptor a warm bubblewrap sandbox's launcher gives bwrap its
 *  root's bind on (`bwrap --args`): "--bind META/mnt /", so that no
 *  command line of the warm sandbox names META (launch() in
 *  supervisor.c). */
#define PROTO_ROOT_ARGS_FD 5
#define PROTO_ROOT_ARGS_FD_STR "5"

/** A warm supervisor's exit status when it could not rename its directory
 *  to the one CLAIM named (it exists): its keeper removes its own
 *  directory only, never the one of that name. */
#define PROTO_EXIT_SPARE_ONLY 5

/** The bubblewrap launcher's exit status when --make-keep's META exists
 *  already (the library names another). */
#define PROTO_EXIT_EXISTS 6

#define PROTO_HEADER_SIZE 8u
/** Upper bound of a payload (argv and env of one exec included). */
#define PROTO_MAX_FRAME (4u << 20)
/** Descriptors that ride with an EXEC frame. */
#define PROTO_EXEC_FDS 3
/** ... and with an EXEC_QUIET frame at most: the exit socket may follow. */
#define PROTO_EXEC_FDS_MAX 4
/** EXEC tty_flags: stdin is a stream of its own (not /dev/null); its EOF
 *  hangs the terminal up (SIGHUP to the command's session). */
#define PROTO_TTY_STDIN 1u

/** The first part of a warm supervisor's directory's name (BASE/
 *  PROTO_SPARE_PREFIX XXXXXX), renamed at CLAIM to the sandbox's. */
#define PROTO_SPARE_PREFIX ".sbx-spare-"

/** Bytes of a warm supervisor's last argument: a meta directory (shorter
 *  than a unix socket path) and "--sandbox-dir=" fit. */
#define PROTO_WARM_PAD 128

/** The descriptor the supervisor finds its control socket on. */
#define PROTO_CONTROL_FD 3
/** Descriptors that ride with CONFIG: the bound socket, its file (O_PATH)
 *  and, for an attached sandbox, the owner's pidfd (PROTO_CONFIG_FDS_MAX);
 *  after CLAIM only that pidfd. */
#define PROTO_CONFIG_FDS 2
#define PROTO_CONFIG_FDS_MAX 3
/** Longest lifetime CONFIG carries (ms): about 24 days, so that every
 *  deadline fits a poll timeout's arithmetic. */
#define PROTO_LIFETIME_MAX_MS ((uint64_t)INT32_MAX)

typedef enum proto_type {
    PROTO_HELLO = 1,
    PROTO_CONFIG = 2,
    PROTO_READY = 3,
    PROTO_ERROR = 4,
    PROTO_EXEC = 5,
    PROTO_STARTED = 6,
    PROTO_EXIT = 7,
    PROTO_KILL = 8,
    PROTO_KILLED = 9,
    PROTO_PING = 10,
    PROTO_PONG = 11,
    PROTO_DESTROY = 12,
    PROTO_DESTROYED = 13,
    PROTO_OWN = 14,
    PROTO_OWNED = 15,
    PROTO_DETACH = 16,
    PROTO_DETACHED = 17,
    PROTO_RESIZE = 18,
    PROTO_RESIZED = 19,
    PROTO_CLAIM = 20,
    PROTO_FORK = 21,
    PROTO_FORKED = 22,
    PROTO_EXEC_QUIET = 23
} proto_type;

/** ERROR kinds. */
typedef enum proto_err_kind {
    PROTO_ERR_INTERNAL = 1,   /* the supervisor failed (message says why) */
    PROTO_ERR_CWD = 2,        /* the working directory cannot be used */
    PROTO_ERR_PROTOCOL = 3,   /* malformed request */
    PROTO_ERR_DEADLINE = 4    /* EXEC read whole at or after its start_by:
                               * nothing started (errno ETIMEDOUT) */
} proto_err_kind;

/** Seconds a caller waits for the answer to a KILL or RESIZE of a
 *  supervisor that is stopped (SIGSTOP, a debugger: proto_proc_stopped)
 *  before it takes it as not answering (see KILL): a command with a
 *  timeout returns at most about this long after its timeout when its
 *  supervisor is stopped. One that is not stopped but leaves the frame
 *  unread (proto_unread_bytes) for the caller's whole bound (hung) is not
 *  answering either; one that read it is at work on it (a SIGKILL's wait
 *  for the tree's end takes up to 2 s), and is waited for. */
#define PROTO_ANSWER_SECS 2.0

/** 1 when @pid is stopped (state T, or t: by a tracer), else 0. */
int proto_proc_stopped(pid_t pid);

/**
 * Bytes sent on connected unix stream socket @fd that its peer has not read
 * yet (SIOCOUTQ: what the kernel still holds of them, so more than were
 * sent; 0 once the peer has read everything). -1 with errno on error. A
 * request is read whole when this is 0 after it was sent and before
 * anything else was.
 */
int proto_unread_bytes(int fd);

/**
 * The message of a timeout on a supervisor that did not answer a request
 * for @secs seconds: it names sandbox @id and supervisor @pid (saying it is
 * stopped when /proc says so) and, with @not_started, that the command did
 * not start and never will (it was read after its start_by), else that it
 * may have started and ends once the supervisor runs again. Into @buf of
 * @size bytes; returns @buf.
 */
char *proto_stall_message(char *buf, size_t size, const char *id, pid_t pid, double secs,
                          int not_started);

/** A frame under construction; the header is filled by proto_buf_finish. */
typedef struct proto_buf {
    unsigned char *data;
    size_t len;
    size_t cap;
    int failed;
} proto_buf;

void proto_buf_init(proto_buf *b, uint32_t type);
void proto_buf_free(proto_buf *b);
void proto_put_u32(proto_buf *b, uint32_t v);
void proto_put_i32(proto_buf *b, int32_t v);
void proto_put_u64(proto_buf *b, uint64_t v);
void proto_put_str(proto_buf *b, const char *s);
/** Writes the header; returns 0, or -1 when memory ran out or the frame
 *  is larger than PROTO_MAX_FRAME. */
int proto_buf_finish(proto_buf *b);

/** Splits a received header. Returns 0, or -1 when the length is too big. */
int proto_parse_header(const unsigned char hdr[PROTO_HEADER_SIZE],
                       uint32_t *type, uint32_t *len);

/** Cursor over a received payload; any overrun sets failed. */
typedef struct proto_reader {
    const unsigned char *p;
    size_t left;
    int failed;
} proto_reader;

void proto_reader_init(proto_reader *r, const void *payload, size_t len);
uint32_t proto_get_u32(proto_reader *r);
int32_t proto_get_i32(proto_reader *r);
uint64_t proto_get_u64(proto_reader *r);
/** A NUL-terminated string pointing into the payload, or NULL on error. */
const char *proto_get_str(proto_reader *r);

/** Fields of /proc/PID/stat that the local backend needs. */
typedef struct proto_proc {
    char state;                  /* field 3 */
    pid_t ppid;                  /* field 4 */
    pid_t sid;                   /* field 6 */
    unsigned long long start;    /* field 22, clock ticks after boot */
} proto_proc;

/** Reads /proc/@pid/stat. Returns 0, or -1 (errno set) when it is gone. */
int proto_proc_stat(pid_t pid, proto_proc *out);

/** The file in a sandbox's meta directory that names the owner ("UID
 *  GID\n") a caller's workdir had before bubblewrap lent it to the
 *  sandbox's user. */
#define PROTO_WORKDIR_OWNER "workdir-owner"

/**
 * Reads META/workdir-owner (@meta the sandbox's meta directory): 0 with
 * *@uid and *@gid, or -1 when there is none, when it is not a regular file
 * of this effective user that nobody else may write (only a record this
 * library wrote counts), or when it is not that one line.
 */
int proto_workdir_owner(const char *meta, unsigned *uid, unsigned *gid);

/** 1 when @pid runs and started at @start (0 = any start), else 0.
 *  A zombie counts as gone. When /proc cannot be read for want of a
 *  descriptor or memory, 1 when the pid exists (start not checked). */
int proto_proc_alive(pid_t pid, unsigned long long start);

/** Called by proto_walk_descendants for each descendant @pid, with what
 *  its /proc/PID/stat said just before (a zombie has state 'Z'). */
typedef void (*proto_visit_fn)(pid_t pid, const proto_proc *st, void *data);

/**
 * Calls @fn for every descendant of @ancestor (not @ancestor itself),
 * parents before their children. The tree is followed down through
 * /proc/PID/task/TID/children, so the cost grows with the size of the tree,
 * not with the number of processes on the host; a process is visited only
 * while its parent is still the one it was listed under. Where the kernel
 * has no such files (CONFIG_PROC_CHILDREN unset) it falls back to reading
 * /proc/PID/stat of every process on the host.
 *
 * A snapshot, not atomic: a process forked or reparented during the walk
 * may be missed, so callers that must end a tree repeat until nothing is
 * left. Thread-safe (no shared state but a cached probe of the kernel).
 */
void proto_walk_descendants(pid_t ancestor, proto_visit_fn fn, void *data);

/** Sends @sig to every live descendant of @ancestor (proto_walk_descendants).
 *  Returns how many live descendants it signalled and stores in *@zombies
 *  (may be NULL) how many zombies it saw. */
size_t proto_kill_descendants(pid_t ancestor, int sig, size_t *zombies);

/** Removes the tree at absolute @path (never following a symlink, never
 *  onto another filesystem; its own rights restored where a command took
 *  them). Returns 0 when it is gone (or never was), else -1 with errno.
 *  Out of descriptors (EMFILE, ENFILE) or memory, it still removes by
 *  name what a sandbox's meta directory holds before its supervisor runs
 *  (sock, record, log, an empty root/ and root/tmp/, bubblewrap's empty
 *  lower/, work/ and mnt/) and the directory, and past that (EMFILE)
 *  has `rm -rf --one-file-system` remove it in a child process that
 *  closed every descriptor it inherited,
 *  so a create that failed for want of descriptors leaves nothing. */
int proto_rm_tree(const char *path);

/** Removes from a caller's root directory @root (bubblewrap's root_dir)
 *  the mount points bwrap made in it: the system tree's names when they
 *  are empty directories or symlinks equal to the host's, and the
 *  supervisor's empty placeholder .sbx/sbx-supervisor with .sbx/run and
 *  .sbx; anything else stays. 0, or -1 with errno when @root cannot be
 *  opened. Used by destroy and by the launcher's keeper. */
int proto_clean_bwrap_root(const char *root);

/** The first part of a trash name: a meta directory DIR/NAME goes to
 *  DIR/PROTO_TRASH_PREFIX NAME at DESTROY (see DESTROY above). */
#define PROTO_TRASH_PREFIX ".sbx-trash-"

/** A trash directory older than this (seconds since its rename, its
 *  ctime) has lost the supervisor and keeper that were removing it. */
#define PROTO_TRASH_STALE_SECS 60

/** The trash name of absolute meta directory @meta (malloc'd), or NULL
 *  with errno (ENOMEM, or EINVAL when @meta has no last component). */
char *proto_trash_path(const char *meta);

/** The destroy's lock of meta directory @meta: an open descriptor holding
 *  its exclusive flock(2), taken without waiting, to be closed once META
 *  has its trash name (proto_meta_to_trash()); should the holder die
 *  before, the keeper, which takes the lock once the sandbox ended,
 *  removes META as it is. -1 (errno; EWOULDBLOCK: another destroy holds
 *  it) when not taken. */
int proto_meta_lock(const char *meta);

/** Renames meta directory @meta to its trash name (proto_trash_path()),
 *  never over an existing one, for the keeper to remove. 0, or -1 (errno)
 *  when it stays where it is. */
int proto_meta_to_trash(const char *meta);

/** Removes every trash directory (PROTO_TRASH_PREFIX) directly under
 *  absolute directory @dir that belongs to this effective user and was
 *  renamed there at least @min_age seconds ago (its ctime;
 *  PROTO_TRASH_STALE_SECS: younger ones are being removed by their
 *  supervisor), and every spare directory (PROTO_SPARE_PREFIX) of this
 *  user as old whose supervisor is gone (nothing listens on its sock, or
 *  there is none: the spare and its keeper were both killed). A live
 *  spare's listener gets a connection that hangs up at once. Returns how
 *  many it removed; errors are ignored (a later sweep tries again). */
size_t proto_sweep_trash(const char *dir, long min_age);

/** A pidfd of @pid (close-on-exec), or -1 with errno. */
int proto_pidfd_open(pid_t pid);

#endif /* SBX_LOCAL_PROTO_H */
