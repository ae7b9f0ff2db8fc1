"""cgroupfs: the mounted hierarchies and the cgroup that holds one command.

Works on cgroup v2 (a real ``/sys/fs/cgroup`` or the ``unified`` mount of a
hybrid host) and on the v1 ``pids``, ``memory`` and ``freezer`` controllers.
Killing uses ``cgroup.kill`` where the kernel has it (atomic, forks cannot race
it); otherwise freeze (v1 ``freezer``), kill every member, thaw, until empty.
Each pid is signalled through a pidfd taken *before* checking that the process
is still a member, so a recycled pid is never signalled.

Membership: v1 membership is per thread (a thread may move itself in, fork and
move back); v2 membership is per process, so a child joins after ``fork`` by
writing ``0`` into ``cgroup.procs`` through fds the supervisor opened
(``JOIN_SCRIPT``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dsh.sandbox.host_tools import system_tool

#: The v1 controllers used here: limits (pids, memory) and race-free kills (freezer).
V1_CONTROLLERS = ("pids", "memory", "freezer")

#: Joins the cgroups whose ``cgroup.procs`` fds are named before ``--`` (writing
#: ``0`` means "the writer"), closes each fd so the command cannot use it, then
#: execs the rest of argv exactly ("$@"; nothing of the command is evaluated).
#: Exit 125 when a cgroup cannot be joined: the command never runs outside it.
JOIN_SCRIPT = (
    'while [ "$1" != -- ]; do case $1 in ""|*[!0-9]*) exit 125;; esac; '
    'eval "echo 0 >&$1 && exec $1>&-" || exit 125; shift; done; shift; exec "$@"'
)

_KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class Hierarchy:
    """One mounted cgroup hierarchy and this process's place in it."""

    version: int  # 1 or 2
    mount: Path
    root: str  # the mount's root inside the cgroup namespace (mountinfo field 4)
    controllers: tuple[str, ...]  # v1: the controllers bound to it; v2: ()
    own: str  # this process's cgroup (/proc/self/cgroup)

    @property
    def key(self) -> str:
        """``"v2"`` or the v1 controller this module uses it for."""
        if self.version == 2:
            return "v2"
        return next(c for c in V1_CONTROLLERS if c in self.controllers)

    @property
    def own_dir(self) -> Path:
        return self.dir_of(self.own)

    def dir_of(self, cgroup: str) -> Path:
        rel = cgroup[len(self.root) :] if self.root != "/" else cgroup
        return self.mount / rel.lstrip("/")

    def cgroup_of(self, path: Path) -> str:
        """The path ``/proc/<pid>/cgroup`` shows for the directory ``path``."""
        rel = path.relative_to(self.mount).as_posix()
        return "/" + "/".join(p for p in (self.root.strip("/"), "" if rel == "." else rel) if p)

    def holds(self, line: str) -> bool:
        """Is this ``/proc/<pid>/cgroup`` line about this hierarchy?"""
        hid, names, _path = line.split(":", 2)
        if self.version == 2:
            return hid == "0" and names == ""
        return self.key in names.split(",")


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape") if "\\" in field else field


def discover(proc: str = "/proc/self") -> tuple[Hierarchy, ...]:
    """The v2 hierarchy and the v1 ``pids``/``memory``/``freezer`` ones this process is in."""
    own: dict[str, str] = {}
    try:
        with open(f"{proc}/cgroup", encoding="utf-8") as table:
            for line in table:
                hid, listed, where = line.rstrip("\n").split(":", 2)
                for name in listed.split(",") if listed else ["v2" if hid == "0" else ""]:
                    own.setdefault(name, where)
        with open(f"{proc}/mountinfo", encoding="utf-8") as mounts:
            lines = mounts.read().splitlines()
    except (OSError, ValueError):
        return ()
    found: dict[str, Hierarchy] = {}
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, tail_fields = head.split(), tail.split()
        if len(fields) < 5 or len(tail_fields) < 3:
            continue
        fstype, options = tail_fields[0], tail_fields[2].split(",")
        if fstype == "cgroup2":
            names: tuple[str, ...] = ()
            key = "v2"
        elif fstype == "cgroup":
            names = tuple(o for o in options if o in V1_CONTROLLERS)
            key = next((c for c in V1_CONTROLLERS if c in names), "")
        else:
            continue
        path = own.get(key)
        root = _unescape(fields[3])
        if not key or key in found or path is None or not (root == "/" or (path + "/").startswith(root + "/")):
            continue  # not ours, a second mount of the same hierarchy, or outside its root
        found[key] = Hierarchy(2 if key == "v2" else 1, Path(_unescape(fields[4])), root, names, path)
    return tuple(found.values())


@dataclass(frozen=True)
class Limits:
    """What a command cgroup caps (``None``: no cap)."""

    pids_max: int | None = None
    memory_max: int | None = None


def write_value(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def members(path: Path) -> list[int]:
    try:
        with open(path / "cgroup.procs", "rb") as procs:
            return [int(x) for x in procs.read().split()]
    except FileNotFoundError:
        return []


class CommandCgroup:
    """The directories (one per hierarchy) that hold one command."""

    def __init__(self, dirs: Iterable[tuple[Hierarchy, Path]], limits: Limits | None = None) -> None:
        self.dirs: tuple[tuple[Hierarchy, Path], ...] = tuple(dirs)
        self.limits = limits or Limits()
        self._moves: tuple[list[int], list[int]] | None = None

    def path(self, controller: str) -> Path | None:
        """The directory in the hierarchy of ``controller`` (``"v2"`` for the v2 one)."""
        if controller == "v2":
            return next((d for h, d in self.dirs if h.version == 2), None)
        return next((d for h, d in self.dirs if controller in h.controllers), None)

    @property
    def per_process(self) -> bool:
        """Must the child join after fork (``JOIN_SCRIPT``)?  v2 membership is per process."""
        return any(h.version == 2 for h, _ in self.dirs)

    def open_procs(self) -> list[int]:
        """``cgroup.procs`` fds (close-on-exec) for ``JOIN_SCRIPT``: opened here, by the
        unrestricted supervisor; the kernel checks the opener's rights, not the writer's."""
        return open_all(d / "cgroup.procs" for _, d in self.dirs)

    def thread_moves(self) -> tuple[list[int], list[int]]:
        """fds of this cgroup's v1 ``tasks`` files and of this process's own ones, for a
        thread that moves itself in, forks, and moves back (v1 membership is per thread).
        Opened once and kept with the cgroup (reused from the pool): the caller must not
        close them."""
        if self._moves is None:
            v1 = [(h, d) for h, d in self.dirs if h.version == 1]
            enter = open_all(d / "tasks" for _, d in v1)
            try:
                leave = open_all(h.own_dir / "tasks" for h, _ in v1)
            except BaseException:
                close_all(enter)
                raise
            self._moves = (enter, leave)
        return self._moves

    def empty(self) -> bool:
        """No member left?  Every member is in every directory, so one read tells."""
        return not self.dirs or not members(self.dirs[0][1])

    def pids(self) -> set[int]:
        found: set[int] = set()
        for _, d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found.update(members(d))
        return found

    def _signalmembers(self, sig: int) -> None:
        for hierarchy, d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                for pid in members(d):
                    signal_if_member(pid, hierarchy, hierarchy.cgroup_of(d), sig)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to every member; for SIGKILL, until the cgroup is empty."""
        if sig != signal.SIGKILL:
            self._signalmembers(sig)
            return
        if self.empty():
            return  # the common case: the command and its children are gone
        v2 = self.path("v2")
        if v2 is not None and (v2 / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                write_value(v2 / "cgroup.kill", "1")
        freezer = self.path("freezer")
        deadline = time.monotonic() + _KILL_WAIT_S
        while self.pids() and time.monotonic() < deadline:
            frozen = freezer is not None and _freeze(freezer, deadline)
            self._signalmembers(signal.SIGKILL)
            if frozen and freezer is not None:
                with contextlib.suppress(OSError):
                    write_value(freezer / "freezer.state", "THAWED")
            time.sleep(0.002)

    def remove(self) -> None:
        """Kill what is left and remove the directories."""
        self.kill(signal.SIGKILL)
        if self._moves is not None:
            close_all(self._moves[0] + self._moves[1])
            self._moves = None
        for _, d in self.dirs:
            rmdir_when_empty(d)


def open_all(paths: Iterable[Path]) -> list[int]:
    fds: list[int] = []
    try:
        for path in paths:
            fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
    except BaseException:
        close_all(fds)
        raise
    return fds


def close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def signal_if_member(pid: int, hierarchy: Hierarchy, cgroup: str, sig: int) -> None:
    """Signal ``pid`` only if, held by a pidfd, it is still in ``cgroup`` (no pid reuse)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return  # gone
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as table:
            paths = [line.rstrip("\n").split(":", 2)[2] for line in table if hierarchy.holds(line)]
        if any(p == cgroup or p.startswith(cgroup + "/") for p in paths):
            signal.pidfd_send_signal(fd, sig)
    except OSError:
        pass  # exited meanwhile
    finally:
        os.close(fd)


def _freeze(freezer: Path, deadline: float) -> bool:
    try:
        write_value(freezer / "freezer.state", "FROZEN")
        while (freezer / "freezer.state").read_text().strip() != "FROZEN":
            if time.monotonic() > deadline:
                return True  # kill what we can; the caller thaws
            time.sleep(0.001)
    except OSError:
        return False
    return True


def rmdir_when_empty(path: Path) -> None:
    deadline = time.monotonic() + _KILL_WAIT_S
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            # EBUSY until the last member has exited; anything else will not change.
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                return
            time.sleep(0.005)


@functools.cache
def _shell(name: str) -> str | None:
    # The system's shell, never one on the caller's PATH (a planted one runs as the caller).
    return system_tool(name)


def join_shells() -> tuple[str | None, str | None]:
    """The shells ``join_args`` may start (``sh``, ``bash``), for checks of where they lie."""
    return _shell("sh"), _shell("bash")


def join_args(fds: Sequence[int]) -> list[str]:
    """``sh -c JOIN_SCRIPT`` with the ``cgroup.procs`` fds, ending with ``--``.

    POSIX only promises redirections of fds 0-9 (dash refuses more): bash, which
    takes any fd, is used when a fd is above 9.  Raises OSError without a shell.
    """
    shell = _shell("sh") if max(fds, default=0) <= 9 else _shell("bash")
    if shell is None:
        raise OSError(errno.ENOENT, "no shell (sh, or bash for fds above 9) to join the command's cgroup")
    return [shell, "-c", JOIN_SCRIPT, "dsh-cgroup-join", *(str(fd) for fd in fds), "--"]
