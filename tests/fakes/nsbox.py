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

File paths are sandbox paths ("/work/x"); host_path() maps them into the
directory and refuses a path that leaves it (`..` or a symlink out).

Python 3 standard library only.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

# bwrap --die-with-parent ends an instance when the thread that started it
# ends: every instance is started from this one long-lived thread.
_SPAWNER = ThreadPoolExecutor(max_workers=1)

# Host directories every sandbox sees, read-only.
_RO_DIRS = ("usr", "etc", "opt")
# Host entries that are symlinks into /usr on merged-/usr systems.
_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
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
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, user=None, tty=False,
              cgroup=None):
        """Starts @argv inside the sandbox, in a session of its own.

        @env: the whole environment of the command (a dict), or None for a
        minimal one. @cwd: sandbox path (must exist: check with host_path()
        first). @user: (uid, gid) the command runs as (setpriv, no
        supplementary groups), or None for root. @tty: stdin is a terminal
        that becomes the session's controlling terminal. @cgroup: a cgroup
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
        args = (["nsenter", "-t", str(pid), "-m", "-p", "-r"] + (["-n"] if self.no_net else [])
                + ["--"] + as_user
                + ["/usr/bin/env", "-C", cwd, "--"] + list(argv))
        pre = None
        if tty or cgroup:
            import fcntl
            import termios

            def pre():
                if cgroup:
                    with open(os.path.join(cgroup, "cgroup.procs"), "w") as fh:
                        fh.write(str(os.getpid()))
                if tty:
                    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        c = subprocess.Popen(args, env=full_env, stdin=stdin, stdout=stdout, stderr=stderr,
                             start_new_session=True, preexec_fn=pre)
        with self.lock:
            self.commands.add(c)
        return c

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
