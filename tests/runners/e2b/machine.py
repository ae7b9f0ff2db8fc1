"""An emulated remote machine for the envd test double: private namespaces over a directory.

E2B runs commands in a remote VM.  Offline, the double stands that VM in with
one long-lived ``bwrap`` process that holds private namespaces:

- pid, net, ipc, uts: host processes are invisible (``kill``, ``/proc/<pid>``
  reach only the machine's own), the loopback is the machine's own (host
  listeners are unreachable), and killing the machine kills everything in it;
- mount: ``/`` is ``root`` (writable: what the machine writes lands under
  ``root``, where tests can look), ``/usr`` (and the ``/bin``... symlinks) is
  the host's read-only, ``/etc`` is the machine's own (its user database,
  everything else a symlink to the host's ``/etc``, bound read-only at
  ``/.envd-double/host-etc``), fresh ``/proc`` and ``/dev``;
- user: the machine has its own uids.  Started as root, the double maps
  machine uid 0 to host root (so the files under ``root`` stay the host's to
  clean up) and machine uids 1..65535 to a random, otherwise unused host range,
  so ``useradd``'s users are real, unprivileged uids: permissions and
  ``RLIMIT_NPROC`` work as on E2B.  Started unprivileged, a user namespace can
  map only one uid: every machine user is that one uid, non-root users just run
  without capabilities, and ``useradd``/``chown`` are shimmed (``multi_user``
  is False).

Every command enters all those namespaces with ``nsenter``, so the commands of
one machine share its filesystem and pid namespace (a second command can signal
the first one's processes, as the runner's tree kill does).

This emulates a separate machine for tests; it is not E2B and the project
claims no security boundary from it.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import platform
import secrets
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

STATE_DIR = ".envd-double"  # the double's own files inside the machine (root-owned)
SHIMS = f"/{STATE_DIR}/bin"
HOST_ETC = f"/{STATE_DIR}/host-etc"
PATH = f"{SHIMS}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The machine's own user database (the rest of /etc is the host's, read-only).
_OWN_ETC = frozenset({"passwd", "group", "shadow", "gshadow", "passwd-", "group-", "shadow-",
                      "gshadow-", "subuid", "subgid", "sudoers", "sudoers.d", "hostname",
                      "hosts", ".pwd.lock"})
_PASSWD = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n" \
          "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
_GROUP = "root:x:0:\nsudo:x:27:user\nuser:x:1000:\nnogroup:x:65534:\n"
# Before the command replaces it, the launcher reports its pid inside the machine
# as the first line of stdout (or that the working directory is missing).
LAUNCHER = 'cd -- "$1" 2>/dev/null || { echo nocwd; exit 126; }; shift; echo "$$"; exec "$@"'
# With a pty (envd's creack/pty start): the command leads a new session whose
# controlling terminal is the pty on its stdio.  ``setsid`` does not fork here
# (the launcher leads no process group), so the pid reported stays the command's.
PTY_LAUNCHER = ('cd -- "$1" 2>/dev/null || { echo nocwd; exit 126; }; shift; echo "$$"; '
                'exec setsid --ctty "$@"')

def own_session_keyring() -> None:
    """``preexec_fn``: the child starts a new, empty session keyring.

    A real E2B sandbox is another machine and shares no keyring with the
    caller; the double shares this kernel, and a child inherits the caller's
    session keyring (a login session has one: pam_keyinit), whose keys it
    would possess.  Joining an anonymous session keyring cuts that link.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYS_KEYCTL, _KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        raise OSError(ctypes.get_errno(), "keyctl(KEYCTL_JOIN_SESSION_KEYRING)")


_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(platform.machine(), 250)
_KEYCTL_JOIN_SESSION_KEYRING = 1
# Open the peer (slave) of a pty master without looking its name up (Linux 4.13+).
_TIOCGPTPEER = 0x5441
_TIOCSPTLCK = 0x40045431



class MachineError(Exception):
    pass


class Machine:
    """One emulated machine over ``root``; ``start()`` it, ``stop()`` kills all in it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.multi_user = os.geteuid() == 0
        self.init_pid = 0  # host pid of a process inside all the machine's namespaces
        self._popen: subprocess.Popen[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------------
    def prepare_root(self) -> None:
        """The machine's image: mount points, /etc, writable /tmp (idempotent)."""
        root = self.root
        for d, mode in (("usr", 0o755), ("proc", 0o755), ("dev", 0o755), ("etc", 0o755),
                        ("home", 0o755), ("root", 0o700), ("tmp", 0o1777), ("var/tmp", 0o1777),
                        (f"{STATE_DIR}/bin", 0o755), (f"{STATE_DIR}/host-etc", 0o755)):
            (root / d).mkdir(parents=True, exist_ok=True)
            (root / d).chmod(mode)
        for name in os.listdir("/"):  # merged /usr: /bin -> usr/bin ...
            target = Path("/", name)
            if target.is_symlink() and os.readlink(target).lstrip("/").startswith("usr/") \
                    and not os.path.lexists(root / name):
                (root / name).symlink_to(os.readlink(target))
        etc = root / "etc"
        for name in os.listdir("/etc"):
            if name not in _OWN_ETC and not os.path.lexists(etc / name):
                (etc / name).symlink_to(f"{HOST_ETC}/{name}")
        for name, text, mode in (("passwd", _PASSWD, 0o644), ("group", _GROUP, 0o644),
                                 ("shadow", "root:*:19000:0:99999:7:::\nuser:*:19000:0:99999:7:::\n",
                                  0o640), ("gshadow", "root:*::\nuser:!::\n", 0o640),
                                 ("hostname", "e2b-double\n", 0o644),
                                 ("hosts", "127.0.0.1 localhost e2b-double\n::1 localhost\n", 0o644)):
            if not (etc / name).exists():
                (etc / name).write_text(text)
                (etc / name).chmod(mode)
        (root / "home/user").mkdir(exist_ok=True)

    def start(self) -> None:
        """Start the machine from a thread that lives as long as it does
        (``--die-with-parent`` follows the thread that forked it)."""
        self.prepare_root()
        ready = threading.Event()
        failure: list[BaseException] = []
        threading.Thread(target=self._own, args=(ready, failure), daemon=True,
                         name="envd-double-machine").start()
        ready.wait(120)
        if failure or not self.init_pid:
            raise MachineError(f"the emulated machine did not start: {failure}")

    def _own(self, ready: threading.Event, failure: list[BaseException]) -> None:
        try:
            popen = self._spawn()
        except BaseException as exc:  # reported by start()
            failure.append(exc)
            ready.set()
            return
        ready.set()
        popen.wait()

    def _spawn(self) -> subprocess.Popen[bytes]:
        go_r, go_w = os.pipe()
        info_r, info_w = os.pipe()
        binds = ["--bind", str(self.root), "/", "--ro-bind", "/usr", "/usr",
                 "--ro-bind", "/etc", HOST_ETC, "--proc", "/proc", "--dev", "/dev",
                 # As on an E2B VM: POSIX semaphores and shared memory (multiprocessing) work.
                 "--perms", "1777", "--tmpfs", "/dev/shm"]
        prefix = Path(sys.base_prefix).resolve()
        if not str(prefix).startswith("/usr"):  # the test interpreter, as in the image
            binds += ["--ro-bind", str(prefix), str(prefix)]
        bwrap = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                 "--hostname", "e2b-double", "--die-with-parent", *binds,
                 "--info-fd", str(info_w), "--chdir", "/",
                 # Ready once bwrap has built the filesystem and runs the command.
                 "/bin/sh", "-c", "echo ready; exec sleep infinity"]
        # unshare creates the user namespace; it waits for its uid map (written
        # from here) before bwrap, root in that namespace, builds the rest.
        popen = subprocess.Popen(
            ["unshare", "--user", "--", "/bin/sh", "-c", 'read go; exec "$@" </dev/null', "sh",
             *bwrap], pass_fds=(info_w,), stdin=go_r, stdout=subprocess.PIPE, preexec_fn=own_session_keyring)
        os.close(go_r)
        os.close(info_w)
        self._popen = popen
        try:
            self._map_users(popen.pid)
            os.write(go_w, b"go\n")
            with os.fdopen(info_r, "rb") as info:
                data = info.read()  # bwrap closes it once written (or on failure)
            init_pid = int(json.loads(data)["child-pid"])
            assert popen.stdout is not None
            if popen.stdout.readline() != b"ready\n":
                raise MachineError("bwrap did not start the machine")
            popen.stdout.close()
            self.init_pid = init_pid
        except BaseException:
            popen.kill()
            raise
        finally:
            os.close(go_w)
        return popen

    def _map_users(self, pid: int) -> None:
        own = os.readlink("/proc/self/ns/user")
        for _ in range(2000):  # until unshare has made the namespace (bounded)
            if os.readlink(f"/proc/{pid}/ns/user") != own:
                break
            threading.Event().wait(0.005)
        else:
            raise MachineError("unshare --user did not create a user namespace")
        if self.multi_user:
            base = 0x10000 * secrets.choice(range(0x100, 0x8000))  # an unused host range
            uids = gids = f"0 0 1\n1 {base + 1} 65535\n"
            home = self.root / "home/user"
            if os.lstat(home).st_uid == 0:  # the template's user owns its home
                os.lchown(home, base + 1000, base + 1000)
        else:
            Path(f"/proc/{pid}/setgroups").write_text("deny")
            uids, gids = f"0 {os.geteuid()} 1\n", f"0 {os.getegid()} 1\n"
        Path(f"/proc/{pid}/uid_map").write_text(uids)
        Path(f"/proc/{pid}/gid_map").write_text(gids)

    def stop(self) -> None:
        """Kill the machine: its pid namespace dies with everything in it."""
        popen, self._popen = self._popen, None
        if popen is not None:
            popen.kill()
            popen.wait()
        self.init_pid = 0

    # -- commands -------------------------------------------------------------------
    def argv(self, argv: Sequence[str], *, uid: int, gid: int, cwd: str, pty: bool = False) -> list[str]:
        """The host argv that runs ``argv`` inside the machine as ``uid``/``gid``."""
        if not self.init_pid:
            raise MachineError("the machine is not running")
        enter = ["nsenter", f"--target={self.init_pid}", "--user", "--mount", "--pid", "--net",
                 "--ipc", "--uts", "--root", "--wd", "--preserve-credentials", "--"]
        if uid == 0:
            become: list[str] = []
        elif self.multi_user:
            become = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups", "--"]
        else:  # one uid only: a non-root user is that uid without capabilities
            become = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"]
        launcher = PTY_LAUNCHER if pty else LAUNCHER
        return [*enter, *become, "/bin/sh", "-c", launcher, "launcher", cwd, *argv]

    def openpty(self) -> tuple[int, int]:
        """A (master, slave) pair of the machine's own devpts (its ``/dev/ptmx``),
        as envd, root on the VM, gets one: ``tty`` inside names ``/dev/pts/N``
        of the machine, and the host's ``/dev/pts`` never holds it."""
        if not self.init_pid:
            raise MachineError("the machine is not running")
        master = os.open(f"/proc/{self.init_pid}/root/dev/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            fcntl.ioctl(master, _TIOCSPTLCK, struct.pack("i", 0))  # unlockpt
            slave = fcntl.ioctl(master, _TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except BaseException:
            os.close(master)
            raise
        return master, slave

    def run(self, argv: Sequence[str], *, uid: int, gid: int, cwd: str = "/",
            stdin: bytes = b"", timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
        """Run to completion (the files API); stdout without the launcher's line."""
        done = subprocess.run(self.argv(argv, uid=uid, gid=gid, cwd=cwd), input=stdin,
                              capture_output=True, timeout=timeout, env={"PATH": PATH}, check=False,
                              preexec_fn=own_session_keyring)
        first, _, rest = done.stdout.partition(b"\n")
        return subprocess.CompletedProcess(done.args, done.returncode, rest,
                                           done.stderr if first != b"nocwd" else b"no such cwd")

    def running(self, machine_pid: int) -> bool:
        """Whether a machine process is alive (not a zombie), seen from the host."""
        host = self.host_pid(machine_pid)
        try:
            state = Path(f"/proc/{host}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return host is not None and state not in ("Z", "X")

    def host_processes(self) -> Iterator[tuple[int, str, str]]:
        """(host pid, pid inside the machine, command line) of every process of the machine."""
        ns = os.readlink(f"/proc/{self.init_pid}/ns/pid") if self.init_pid else None
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") != ns:
                    continue
                status = Path(f"/proc/{entry}/status").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            nspid = next((ln.split()[-1] for ln in status.splitlines() if ln.startswith("NSpid:")), "")
            yield int(entry), nspid, cmdline

    def host_pid(self, machine_pid: int) -> int | None:
        """The host pid of a machine process (tests watch machine processes from here)."""
        return next((host for host, inside, _cmd in self.host_processes() if inside == str(machine_pid)), None)

def signal_pidfd(pidfd: int, sig: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, sig)
    except ProcessLookupError:
        pass
