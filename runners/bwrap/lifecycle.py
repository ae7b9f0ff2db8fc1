"""Killing and cleaning up one bwrap sandbox.

``--die-with-parent`` ties the sandbox to the bwrap monitor process, but only
once bwrap's pid 1 has installed its parent-death signal: a monitor killed in
the first milliseconds (an abort right after spawn) can leave the sandbox
running.  So ``kill_tree`` also kills the sandbox's pid 1 directly: bwrap
reports its host pid on ``--info-fd`` during setup (``kill_tree`` waits for
it, bounded), and killing a pid namespace's init kills everything in it.  The pid is taken as a
pidfd and checked to be an init of a pid namespace, so a recycled pid is never
signalled.  Where a limits cgroup exists, every process in it is killed too,
and the cgroup goes back to the runner's session (``release``).

``cleanup`` reaps the sandbox's pid 1 when it came back to the supervisor
(``init_reaper``).

Admission: bwrap binds each ``--bind-fd`` by the name the fd resolves to,
so a directory swapped for a relative symlink while it mounts can send a
writable bind elsewhere (``dsh.runners.linux.mount_check``).  bwrap is
started with ``--block-fd``: its pid 1 waits there once every mount is made,
before the syscall filter and before the command exists.  ``admit`` waits for
it to block, checks the sandbox's mount table against the plan, and only
then writes the byte that lets it go on; otherwise it kills the sandbox and
nothing ran.  The write end stays open until ``cleanup`` (a close would
release pid 1 just as the byte does), so a sandbox that failed its check is
killed before anything could read EOF.

Whether the command ran at all: bwrap exits 1 both when the command does and
when it cannot ``execve`` it (``bwrap: execvp X: No such file or directory``).
Its ``--json-status-fd`` tells them apart: bwrap writes ``{"exit-code": N}``
there only for a command it did exec.  Without that record, the exec failure
becomes 127 (not found) or 126 (not executable), as a shell reports it, and
any other exit of bwrap is its own failure: the command did not start.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import threading
import time
from collections.abc import Callable

from dsh.runners.bwrap import probe_cache
from dsh.runners.bwrap.init_reaper import read_ready, reap_init, sandbox_init
from dsh.runners.bwrap.materialize import OpenedMounts
from dsh.runners.linux.cgroups import CgroupSession, CommandCgroup
from dsh.runners.linux.mount_check import mount_problem
from dsh.sandbox.errors import SandboxChanged, SandboxUnavailable
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.runner import ExitStatus, exec_failure_status

#: bwrap's last words when ``execve`` of the command failed (C locale: bwrap
#: never calls setlocale, so the error text is the C library's English one).
_EXEC_FAILED = LazyPattern(rb"bwrap: execvp [^\n]*: ([^\n]+)\n?\Z")
_MESSAGE_MAX = 8192
#: bwrap's exit status when it dies (setup or exec failure).
_BWRAP_FAILED = 1

#: How long ``kill_tree`` waits for bwrap to report its pid 1 (it does so
#: during setup, before the command starts; only a broken bwrap makes it wait).
INFO_WAIT_S = 5.0
#: How long ``admit`` waits for bwrap to finish its mounts and block (a
#: policy with hundreds of protected paths takes a second or two; a loaded
#: machine more).
SETUP_WAIT_S = 60.0
#: ``read``'s syscall number, where it is known: ``/proc/<pid>/syscall``
#: then shows pid 1 blocked in exactly that call on the block fd.
_READ_SYSCALL = {"x86_64": 0, "aarch64": 63, "riscv64": 63, "loongarch64": 63}.get(os.uname().machine)


class SandboxLifecycle:
    """Owns what one launch holds open: mounts' fds, the info pipe, the filter fd, the cgroup."""

    def __init__(
        self,
        opened: OpenedMounts,
        group: CommandCgroup | None = None,
        session: CgroupSession | None = None,
        *,
        bwrap: bool = True,
        seccomp_fd: int = -1,
        env_fd: int = -1,
    ) -> None:
        self.opened = opened
        self.group = group
        self._session = session
        self.seccomp_fd = seccomp_fd
        # The command's environment (bwrap's --args, or the hop's file).
        self.env_fd = env_fd
        # The cgroup.procs fds the join script writes to (closed at cleanup).
        self.join_fds: list[int] = group.open_procs() if group is not None else []
        self._info_read = self.info_write = -1
        self._status_read = self.status_write = -1
        self.block_read = self._block_write = -1
        if bwrap:  # pipes for bwrap's --info-fd, --json-status-fd and --block-fd
            self._info_read, self.info_write = os.pipe2(os.O_CLOEXEC)
            os.set_blocking(self._info_read, False)
            self._status_read, self.status_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            self.block_read, self._block_write = os.pipe2(os.O_CLOEXEC)
        self._info = b""
        self._lock = threading.Lock()
        self._closed = False
        self._died_in_setup = False

    @property
    def pass_fds(self) -> tuple[int, ...]:
        extra = [fd for fd in (self.info_write, self.status_write, self.block_read, self.seccomp_fd, self.env_fd)
                 if fd != -1]
        return (*self.opened.fds, *extra, *self.join_fds)

    def exit_status(self, status: ExitStatus, stderr: Callable[[], bytes]) -> ExitStatus:
        """The command's status from bwrap's (see the module docstring)."""
        if self._status_read == -1 or status.exit_code != _BWRAP_FAILED or self._command_ran():
            return status
        # Nothing ran: bwrap's own message is all of stderr, and its last line.
        failed = _EXEC_FAILED.search(stderr()[-_MESSAGE_MAX:])
        if failed is None:
            return ExitStatus(exit_code=None)  # bwrap failed before the command started
        not_found = failed.group(1).decode(errors="replace") == os.strerror(errno.ENOENT)
        return ExitStatus(exit_code=exec_failure_status(errno.ENOENT if not_found else errno.EACCES))

    def _command_ran(self) -> bool:
        """Did bwrap report an exit code on its status pipe (written before it exits)?"""
        return b'"exit-code"' in read_ready(self._status_read)

    def admit(self, pid: int, exited: Callable[[], bool]) -> None:
        """Let bwrap (spawned as ``pid``; ``exited`` tells whether it has
        exited) start the command, once its sandbox holds the planned mounts;
        otherwise kill it and raise: nothing ran."""
        if self._block_write == -1:
            return
        problem: str | None = "the check of the sandbox's mounts did not finish"
        try:
            problem = self._mount_problem(exited)
            if problem is None:
                os.write(self._block_write, b"\0")
                os.close(self._block_write)
                self._block_write = -1
        finally:
            if problem is not None:
                self.kill_tree(pid, signal.SIGKILL)
        if problem is not None:
            raise SandboxUnavailable(f"{problem}; nothing ran, retry", runner="bwrap")
        if self._died_in_setup:
            probe_cache.forget_all()  # the next run asks a trial sandbox again
            # A mask over a directory removed since the plan (another session
            # of this user ended and took its state with it) is one bwrap
            # cannot make: plan again rather than fail the command.
            gone = next((path for path in self.opened.masks if not os.path.lexists(path)), None)
            if gone is not None:
                raise SandboxChanged(f"{gone}, planned hidden, was removed while the sandbox was set up; nothing "
                                     "ran", runner="bwrap")

    def _mount_problem(self, exited: Callable[[], bool]) -> str | None:
        deadline = time.monotonic() + SETUP_WAIT_S
        while True:
            with self._lock:
                if self._closed:
                    return "the sandbox was closed while it was set up"
                found = self._sandbox_init(0.05)
                init_fd = self._init_pidfd(0) if found is not None else None
            if found is not None and init_fd is not None:
                break
            if found is not None or exited():
                self._died_in_setup = True
                return None  # bwrap or its pid 1 died in setup: bwrap's own status says why
            if time.monotonic() > deadline:
                return f"bwrap did not report its sandbox's pid 1 within {SETUP_WAIT_S:.0f} s"
        try:
            pid = found[0]
            poller = select.poll()
            poller.register(init_fd, select.POLLIN)
            while not self._blocked(pid):
                if poller.poll(1):
                    self._died_in_setup = True
                    return None  # pid 1 died in setup: bwrap's own status says why
                if time.monotonic() > deadline:
                    return f"bwrap did not finish setting up the sandbox within {SETUP_WAIT_S:.0f} s"
            return mount_problem(pid, self.opened.expected)
        finally:
            os.close(init_fd)

    def _blocked(self, pid: int) -> bool:
        """Is the process ``pid`` waiting in ``read`` on the block fd?"""
        try:
            with open(f"/proc/{pid}/syscall") as fh:
                fields = fh.read().split()
        except OSError:
            return False
        if len(fields) < 2 or fields[0] in ("running", "-1"):
            return False
        try:
            nr, fd = int(fields[0]), int(fields[1], 16)
        except ValueError:
            return False
        return fd == self.block_read and (_READ_SYSCALL is None or nr == _READ_SYSCALL)

    def _sandbox_init(self, wait_s: float = INFO_WAIT_S) -> tuple[int, int | None] | None:
        """Host pid of the sandbox's pid 1, waiting (bounded) for bwrap to report it.

        Our copy of the pipe's write end is closed first, so the wait ends at EOF
        when bwrap (and any wrapper) is gone without having reported a pid.
        """
        if self._info_read == -1:
            return None
        if self.info_write != -1:
            os.close(self.info_write)
            self.info_write = -1
        deadline = time.monotonic() + wait_s
        poller = select.poll()
        poller.register(self._info_read, select.POLLIN)
        while (found := sandbox_init(self._info)) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(int(remaining * 1000) + 1):
                return None
            try:
                chunk = os.read(self._info_read, 4096)
            except BlockingIOError:
                continue
            if not chunk:
                return None
            self._info += chunk
        return found

    def _init_pidfd(self, wait_s: float = INFO_WAIT_S) -> int | None:
        """A pidfd of the sandbox's pid 1, only if that pid still is that process."""
        found = self._sandbox_init(wait_s)
        if found is None:
            return None
        pid, pid_ns = found
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return None  # already gone
        try:
            # Checked after the pidfd exists, so the pid cannot change under us:
            # it must be pid 1 of the very namespace bwrap reported.
            same_ns = pid_ns is None or os.stat(f"/proc/{pid}/ns/pid").st_ino == pid_ns
            with open(f"/proc/{pid}/status") as fh:
                nspid = next((ln.split()[1:] for ln in fh if ln.startswith("NSpid:")), [])
        except OSError:
            same_ns, nspid = False, []
        if not same_ns or len(nspid) < 2 or nspid[-1] != "1":
            os.close(fd)
            return None
        return fd

    def _reap_init(self) -> None:
        found = self._sandbox_init()
        if found is not None:
            reap_init(*found)

    def kill_tree(self, pid: int, sig: int) -> None:
        with self._lock:
            if self._closed:
                init_fd = None
            else:
                init_fd = self._init_pidfd()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
        if init_fd is not None:
            try:
                # Its parent-death signal is SIGKILL anyway; an init ignores
                # catchable signals from outside, so nothing gentler would work.
                signal.pidfd_send_signal(init_fd, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os.close(init_fd)
        if self.group is not None:
            self.group.kill(sig)

    def cleanup(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._reap_init()
        self.opened.close()
        for fd in (self._info_read, self.info_write, self._status_read, self.status_write, self.seccomp_fd,
                   self.env_fd, self.block_read, self._block_write):
            if fd != -1:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.info_write = self.status_write = self.seccomp_fd = self.env_fd = self.block_read = -1
        self._block_write = -1
        for fd in self.join_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.join_fds = []
        if self.group is not None:
            if self._session is not None:
                self._session.release(self.group)
            else:
                self.group.remove()
