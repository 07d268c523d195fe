"""A fake provider's sandbox: a real directory that is `/` for real processes.

Each sandbox is one bubblewrap instance (`bwrap`, new pid, ipc and uts
namespaces) whose root is the sandbox's directory on the host, with the
host's /usr, /etc and /opt bound read-only beside it, so that commands see a
machine of their own: `/work`, `/tmp` and `/root` (HOME) are writable and
belong to the sandbox, `ps` shows only the sandbox's processes, and killing
the instance's first process ends every process in it (the kernel ends a pid
namespace with its init).

Commands enter the instance with nsenter(1) (mount and pid namespaces, the
instance's root), each in a session of its own, so a timeout can kill the
command's process group. The fake servers that use this run as root, as the
test machines do.

A command may also run on a pseudo-terminal of its own (popen_pty(): the
leader of a session whose controlling terminal is the terminal, as a
provider's daemon runs a terminal session), whose master the fake reads
(OutputPump, which also reads a command's pipes), writes (typed input),
resizes (resize(): SIGWINCH) and closes.

File paths are sandbox paths ("/work/x"); host_path() maps them into the
directory and refuses a path that leaves it (`..` or a symlink out).

Python 3 standard library only.
"""

import fcntl
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import termios
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

# bwrap --die-with-parent ends an instance when the thread that started it
# ends: every instance is started from this one long-lived thread.
_SPAWNER = ThreadPoolExecutor(max_workers=1)

# Host directories every sandbox sees, read-only.
_RO_DIRS = ("usr", "etc", "opt")
# Host entries that are symlinks into /usr on merged-/usr systems.
_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# nsenter(1) as the fake's own PATH finds it.
_NSENTER = shutil.which("nsenter") or "/usr/bin/nsenter"
# Writable directories every sandbox starts with.
_OWN_DIRS = ("work", "tmp", "root", "home", "proc", "dev", "run", "var/tmp")


class SandboxGone(Exception):
    """The sandbox's instance is not running (stopped, or deleted)."""


class Box:
    """One sandbox: a directory and, while running, one bwrap instance."""

    def __init__(self, parent_dir, name):
        self.root = tempfile.mkdtemp(prefix=name + "-", dir=parent_dir)
        for d in _OWN_DIRS:
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        os.chmod(os.path.join(self.root, "tmp"), 0o1777)
        for d in _LINKS:
            p = "/" + d
            if os.path.islink(p) and not os.path.lexists(self.root + p):
                os.symlink(os.readlink(p), self.root + p)
        self.lock = threading.Lock()
        self.proc = None        # the bwrap process
        self.child_pid = None   # its child, whose namespaces commands enter
        self.commands = set()   # Popen objects of running commands
        # Set join_net before start(): when started without a network, its
        # commands join the instance's network namespace too (no_net), so
        # they have none either.
        self.join_net = False
        # (host path, sandbox path) pairs bound read-only into the instance
        # at start (a pod's memory cgroup, for its OOM-kill counter).
        self.ro_binds = []
        self.no_net = False

    # ------------------------------------------------------------ lifecycle
    def start(self, allow_internet=True):
        """Starts the instance (no-op when it runs). Raises OSError."""
        _SPAWNER.submit(self._start, allow_internet).result()

    def _start(self, allow_internet):
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                return
            args = ["bwrap", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                    "--hostname", "sandbox", "--die-with-parent",
                    "--bind", self.root, "/"]
            if not allow_internet:
                args.append("--unshare-net")
            self.no_net = not allow_internet and self.join_net
            for d in _RO_DIRS:
                if os.path.isdir("/" + d):
                    args += ["--ro-bind", "/" + d, "/" + d]
            for d in _LINKS:
                p = "/" + d
                if os.path.isdir(p) and not os.path.islink(p):
                    args += ["--ro-bind", p, p]
            for src, dst in self.ro_binds:
                args += ["--ro-bind", src, dst]
            rd, wr = os.pipe()
            args += ["--proc", "/proc", "--dev", "/dev", "--info-fd", str(wr),
                     "--", "/bin/sh", "-c", "echo ready; exec sleep infinity"]
            try:
                proc = subprocess.Popen(args, pass_fds=(wr,), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        start_new_session=True)
            finally:
                os.close(wr)
            buf = b""
            while True:
                chunk = os.read(rd, 4096)
                if not chunk:
                    break
                buf += chunk
            os.close(rd)
            try:
                info = json.loads(buf.decode())
            except ValueError:
                err = proc.stderr.read().decode(errors="replace")
                proc.wait()
                raise OSError("bwrap did not start: " + err.strip())
            # The info comes before the instance's mounts are made; its
            # command's first line comes after.
            if proc.stdout.readline() != b"ready\n":
                err = proc.stderr.read().decode(errors="replace")
                proc.wait()
                raise OSError("bwrap did not start: " + err.strip())
            proc.stdout.close()
            self.proc = proc
            self.child_pid = int(info["child-pid"])

    def running(self):
        with self.lock:
            return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """Ends every process of the sandbox; its files stay."""
        with self.lock:
            proc, self.proc, self.child_pid = self.proc, None, None
            commands, self.commands = self.commands, set()
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.kill()
            proc.wait()
            if proc.stderr:
                proc.stderr.close()
        for c in commands:
            _kill_group(c)

    def delete(self):
        """Stops the sandbox and removes its directory."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------ commands
    def popen(self, argv, env=None, cwd="/", stdin=subprocess.DEVNULL,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, user=None, cgroup=None):
        """Starts @argv inside the sandbox, in a session of its own.

        @env: the whole environment of the command (a dict), or None for a
        minimal one. @cwd: sandbox path (must exist: check with host_path()
        first). @user: (uid, gid) the command runs as (setpriv, no
        supplementary groups), or None for root. @cgroup: a cgroup
        v1 directory the command joins before it runs (its limits hold for
        the command and all it starts). Raises SandboxGone when the
        instance does not run."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                raise SandboxGone()
            pid = self.child_pid
        full_env = default_env()
        if env:
            full_env.update(env)
        as_user = []
        if user is not None:
            as_user = ["/usr/bin/setpriv", "--reuid=%d" % user[0], "--regid=%d" % user[1],
                       "--clear-groups", "--"]
        # The command's PATH holds inside the sandbox only: nsenter is found
        # on the fake's own.
        args = ([_NSENTER, "-t", str(pid), "-m", "-p", "-r"] + (["-n"] if self.no_net else [])
                + ["--"] + as_user
                + ["/usr/bin/env", "-C", cwd, "--"] + list(argv))
        if cgroup:
            # The host's sh joins the cgroup, then becomes nsenter: the
            # command and all it starts are born inside. (A preexec_fn
            # would do the same at the price of a fork of this whole
            # interpreter, where Popen otherwise uses vfork.)
            args = ["/bin/sh", "-c", 'echo $$ >"$0" || exit 125; exec "$@"',
                    os.path.join(cgroup, "cgroup.procs")] + args
        c = subprocess.Popen(args, env=full_env, stdin=stdin, stdout=stdout, stderr=stderr,
                             start_new_session=True)
        with self.lock:
            self.commands.add(c)
        return c

    def popen_pty(self, argv, rows, cols, env=None, cwd="/"):
        """Starts @argv inside the sandbox on a new pseudo-terminal of @rows x
        @cols, as a provider's daemon runs a terminal session: the command
        leads a session of its own whose controlling terminal is the
        terminal's slave (its stdin, stdout and stderr), so the terminal's
        line discipline is real (echo, ^C as SIGINT to its foreground
        group, SIGWINCH on a resize). Returns (Popen, master): the master
        descriptor is the caller's to read, write and close. The command's
        exit status is the Popen's. Raises SandboxGone as popen()."""
        master, slave = os.openpty()
        try:
            resize(master, rows, cols)
            # setsid(1) -c: a new session (the command is not its process
            # group's leader, so no fork) with the slave, its stdin, as the
            # controlling terminal; the wrapper (nsenter) stays out of it,
            # so a ^C reaches the command's group alone.
            c = self.popen(["/usr/bin/setsid", "-c"] + list(argv), env=env, cwd=cwd,
                           stdin=slave, stdout=slave, stderr=slave)
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        return c, master

    def forget(self, c):
        with self.lock:
            self.commands.discard(c)

    def kill_command(self, c, sig=signal.SIGKILL):
        _kill_group(c, sig)

    # ------------------------------------------------------------ files
    def host_path(self, path):
        """Host path of sandbox path @path, or None when it leaves the sandbox."""
        if not path or not path.startswith("/"):
            return None
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            return None
        host = os.path.join(self.root, *parts) if parts else self.root
        # Resolve the parent through the sandbox's own symlinks, never out.
        real_root = os.path.realpath(self.root)
        parent = os.path.realpath(os.path.dirname(host)) if parts else real_root
        if parent != real_root and not parent.startswith(real_root + os.sep):
            return None
        return host


MEMCG = "/sys/fs/cgroup/memory"     # cgroup v1 memory controller


def make_memcg(name, limit):
    """A cgroup v1 memory cgroup limited to @limit bytes (swap included),
    for a sandbox whose commands join it (popen(cgroup=)) and see it
    read-only (bind_memcg()):
    its path, or None where the controller cannot be written."""
    path = os.path.join(MEMCG, name)
    try:
        os.mkdir(path)
        for f in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
            if os.path.exists(os.path.join(path, f)):
                with open(os.path.join(path, f), "w") as fh:
                    fh.write(str(limit))
    except OSError:
        return None
    return path


def drop_memcg(path):
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)


def bind_memcg(box, path):
    """Shows memory cgroup @path read-only at MEMCG in @box (before its
    start), with its oom_kill counter, as a container sees its own cgroup."""
    mp = os.path.join(box.root, MEMCG.lstrip("/"))
    os.makedirs(mp, exist_ok=True)
    for d in ("sys", "sys/fs", "sys/fs/cgroup", MEMCG.lstrip("/")):
        os.chmod(os.path.join(box.root, d), 0o755)
    box.ro_binds.append((path, MEMCG))


def resize(master, rows, cols):
    """Sets the size of the terminal whose master is @master (TIOCSWINSZ):
    its foreground process group gets SIGWINCH when it changed."""
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def pty_leader(c):
    """The host pid of the session leader popen_pty() made for @c (the
    wrapper's child), or None when it is gone."""
    try:
        with open("/proc/%d/task/%d/children" % (c.pid, c.pid)) as f:
            kids = f.read().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


def signal_pty(c, sig):
    """Sends @sig to the command of popen_pty()'s @c (the terminal
    session's leader), as a daemon signals the process it started; when it
    is gone already, to the wrapper's group."""
    leader = pty_leader(c)
    try:
        if leader is not None:
            os.kill(leader, sig)
        else:
            os.killpg(c.pid, sig)
    except OSError:
        pass


def kill_pty_session(c, sig=signal.SIGKILL):
    """Sends @sig to every process of the terminal session of popen_pty()'s
    @c and to the wrapper's group: nothing of the command is left."""
    leader = pty_leader(c)
    if leader is not None:
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[3]) == leader:    # its session
                    os.kill(int(d), sig)
            except (OSError, ValueError, IndexError):
                pass
    _kill_group(c, sig)


class OutputPump:
    """A thread that passes what a command writes on one descriptor (the
    read end of its stdout or stderr pipe, or a terminal's master; an int or
    a file object) to @emit(data), chunk by chunk, as it comes.

    finish(), called once the command's own process has exited, returns when
    everything that process wrote has gone to @emit: the thread has met the
    end of the stream (EOF; EIO from a terminal with no writer left), or the
    descriptor holds nothing more (a background child that still holds it
    open is not waited for, and what it writes later is not the command's
    output). There is no timed wait in it, so on a loaded machine nothing
    the command wrote before it exited is dropped, as a provider's daemon
    reading its pipes to their end drops nothing. @emit runs on the pump's
    thread; an OSError or ValueError from it (the client's connection gone)
    ends the pump. @at_eof(), if given, runs on the pump's thread when the
    stream ends by itself before finish().

    With @close, the pump owns the descriptor: after finish() it goes on
    reading, and dropping, what a background child writes until the end of
    the stream, then closes it (so the child is never blocked on a full
    pipe nor killed by SIGPIPE, and no descriptor stays open); without, it
    stays open and the caller closes it."""

    def __init__(self, src, emit, at_eof=None, close=False):
        self.fd = src if isinstance(src, int) else src.fileno()
        self.src = src
        self.emit = emit
        self.at_eof = at_eof
        self.close = close
        self.budget = 0
        self._done = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _read(self, emit=True):
        """One read: True when the stream goes on, False at its end, None
        when there was nothing to read."""
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return None
        except OSError:
            return False    # EIO: the terminal has no writer left
        if not data:
            return False
        if not emit:
            return True
        self.budget -= len(data)
        try:
            self.emit(data)
        except (OSError, ValueError):
            self.emit = None
            return False    # where it went is gone (a closed connection)
        return True

    def _run(self):
        # poll, not select: a fake that has run many commands holds
        # descriptors past select's FD_SETSIZE (1024).
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        ended = False
        try:
            while True:
                try:
                    r = [fd for fd, _ in poller.poll()]
                except OSError:
                    ended = True
                    break
                if self._wake_r not in r:
                    more = self._read()
                    if more is None:
                        continue    # a terminal said readable, had nothing
                    if not more:
                        ended = True
                        if self.at_eof and self.emit:
                            self.at_eof()
                        break
                    continue
                # finish(): what is left is read without blocking (a
                # terminal's read also pushes through what the line
                # discipline still holds), then the pump stops. What the
                # exited command left unread fits in the pipe's or the
                # terminal's buffer (at most 1 MiB), so a background child
                # writing without pause cannot keep the pump going.
                os.set_blocking(self.fd, False)
                self.budget = 2 << 20
                more = True
                while self.budget > 0 and more:
                    more = self._read()
                ended = more is False
                break
        finally:
            os.close(self._wake_r)
            self._done.set()
        if not self.close:
            return
        if not ended:
            os.set_blocking(self.fd, True)
            while self._read(emit=False):
                pass
        if isinstance(self.src, int):
            os.close(self.src)
        else:
            self.src.close()

    def finish(self):
        """Waits until everything the exited command wrote is emitted (see
        the class), then returns. Call it once."""
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        self._done.wait()
        os.close(self._wake_w)


def default_env():
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "USER": "root",
        "LANG": "C.UTF-8",
        "SANDBOX_ROOT": "",
    }


def _kill_group(c, sig=signal.SIGKILL):
    try:
        os.killpg(c.pid, sig)
    except OSError:
        pass
