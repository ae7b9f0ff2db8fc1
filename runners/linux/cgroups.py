"""Cgroups for the Linux runners: a session cgroup per runner, one cgroup per command.

Works on cgroup v2 (a real ``/sys/fs/cgroup`` or the ``unified`` mount of a
hybrid host) and on the v1 ``pids``, ``memory`` and ``freezer`` controllers,
wherever this process may create child cgroups of its own cgroup:

- limits: ``pids.max``; ``memory.max`` (+ ``memory.swap.max = 0``) on v2,
  ``memory.limit_in_bytes`` (+ ``memory.memsw.limit_in_bytes``) on v1;
- kill: ``cgroup.kill`` where the kernel has it (atomic, forks cannot race it);
  otherwise freeze (v1 ``freezer``), kill every member, thaw, until empty.  Each
  pid is signalled through a pidfd taken *before* checking that the process is
  still a member, so a recycled pid is never signalled;
- a pool of idle command cgroups per limit set: creating a cgroup is on every
  command's path, an empty one is as good as new.

Membership: v1 membership is per thread (a thread may move itself in, fork and
move back); v2 membership is per process, so a child joins after ``fork`` by
writing ``0`` into ``cgroup.procs`` through fds opened here (``JOIN_SCRIPT``).

The session's directories are also handed to a keeper process (``keeper``) that
empties and removes them when this process dies: containment does not depend
on the supervisor surviving.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh.runners.linux.keeper import Keeper

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

_POOL_PER_LIMITS = 4
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
            key = names[0] if names else ""
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


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _members(path: Path) -> list[int]:
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

    def path(self, key: str) -> Path | None:
        return next((d for h, d in self.dirs if h.key == key), None)

    @property
    def per_process(self) -> bool:
        """Must the child join after fork (``JOIN_SCRIPT``)?  v2 membership is per process."""
        return any(h.version == 2 for h, _ in self.dirs)

    def open_procs(self) -> list[int]:
        """``cgroup.procs`` fds (close-on-exec) for ``JOIN_SCRIPT``: opened here, by the
        unrestricted supervisor; the kernel checks the opener's rights, not the writer's."""
        return _open_all(d / "cgroup.procs" for _, d in self.dirs)

    def thread_moves(self) -> tuple[list[int], list[int]]:
        """fds of this cgroup's v1 ``tasks`` files and of this process's own ones, for a
        thread that moves itself in, forks, and moves back (v1 membership is per thread).
        Opened once and kept with the cgroup (reused from the pool): the caller must not
        close them."""
        if self._moves is None:
            v1 = [(h, d) for h, d in self.dirs if h.version == 1]
            enter = _open_all(d / "tasks" for _, d in v1)
            try:
                leave = _open_all(h.own_dir / "tasks" for h, _ in v1)
            except BaseException:
                _close_all(enter)
                raise
            self._moves = (enter, leave)
        return self._moves

    def empty(self) -> bool:
        """No member left?  Every member is in every directory, so one read tells."""
        return not self.dirs or not _members(self.dirs[0][1])

    def pids(self) -> set[int]:
        found: set[int] = set()
        for _, d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found.update(_members(d))
        return found

    def _signal_members(self, sig: int) -> None:
        for hierarchy, d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                for pid in _members(d):
                    _signal_if_member(pid, hierarchy, hierarchy.cgroup_of(d), sig)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to every member; for SIGKILL, until the cgroup is empty."""
        if sig != signal.SIGKILL:
            self._signal_members(sig)
            return
        if self.empty():
            return  # the common case: the command and its children are gone
        v2 = self.path("v2")
        if v2 is not None and (v2 / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(v2 / "cgroup.kill", "1")
        freezer = self.path("freezer")
        deadline = time.monotonic() + _KILL_WAIT_S
        while self.pids() and time.monotonic() < deadline:
            frozen = freezer is not None and _freeze(freezer, deadline)
            self._signal_members(signal.SIGKILL)
            if frozen and freezer is not None:
                with contextlib.suppress(OSError):
                    _write(freezer / "freezer.state", "THAWED")
            time.sleep(0.002)

    def remove(self) -> None:
        """Kill what is left and remove the directories."""
        self.kill(signal.SIGKILL)
        if self._moves is not None:
            _close_all(self._moves[0] + self._moves[1])
            self._moves = None
        for _, d in self.dirs:
            _rmdir(d)


def _open_all(paths: Iterable[Path]) -> list[int]:
    fds: list[int] = []
    try:
        for path in paths:
            fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
    except BaseException:
        _close_all(fds)
        raise
    return fds


def _close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _signal_if_member(pid: int, hierarchy: Hierarchy, cgroup: str, sig: int) -> None:
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
        _write(freezer / "freezer.state", "FROZEN")
        while (freezer / "freezer.state").read_text().strip() != "FROZEN":
            if time.monotonic() > deadline:
                return True  # kill what we can; the caller thaws
            time.sleep(0.001)
    except OSError:
        return False
    return True


def _rmdir(path: Path) -> None:
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


def _available_controllers(session: Path) -> tuple[str, ...]:
    """The v2 controllers (pids, memory) this cgroup was given, for command cgroups."""
    try:
        available = (session / "cgroup.controllers").read_text().split()
    except OSError:
        return ()
    return tuple(name for name in ("pids", "memory") if name in available)


class CgroupSession:
    """This process's session cgroups (one per usable hierarchy) and their command cgroups.

    ``versions`` chooses the hierarchies (``(2,)`` behaves as a v2-only host would).
    """

    def __init__(self, tag: str, *, versions: tuple[int, ...] = (1, 2), keeper: bool = True) -> None:
        self.dirs: dict[str, tuple[Hierarchy, Path]] = {}
        self._lock = threading.Lock()
        self._pool: dict[Limits, list[CommandCgroup]] = {}
        self._counter = 0
        self._keeper: Keeper | None = None
        self._v2_controllers: tuple[str, ...] = ()
        self._created = False
        self._v2_kill = False
        name = f"{tag}-{os.getpid()}-{id(self):x}"
        for hierarchy in discover():
            if hierarchy.version not in versions:
                continue
            session = hierarchy.own_dir / name
            try:
                # A trial: the directories are made with the first command, with
                # the keeper that removes them (probing leaves nothing behind).
                session.mkdir()
            except OSError:
                continue  # not delegated to us (non-root, read-only cgroupfs)
            try:
                if hierarchy.version == 2:
                    self._v2_controllers = _available_controllers(session)
                    self._v2_kill = (session / "cgroup.kill").exists()
            finally:
                _rmdir(session)
            self.dirs[hierarchy.key] = (hierarchy, session)
        self._want_keeper = keeper

    def _create(self) -> None:
        """Make the session directories and start the keeper (under ``_lock``)."""
        made: list[Path] = []
        try:
            for hierarchy, session in self.dirs.values():
                session.mkdir(exist_ok=True)
                made.append(session)
                if hierarchy.version == 2:
                    for name in self._v2_controllers:
                        _write(session / "cgroup.subtree_control", f"+{name}")
            if self._want_keeper:
                from dsh.runners.linux.keeper import Keeper

                # Without a keeper the command would not be held if this process died: fail closed.
                self._keeper = Keeper.start(made)
        except BaseException:
            for path in made:
                _rmdir(path)
            raise
        self._created = True
        atexit.register(self.close)

    @classmethod
    def attach(cls, dirs: Iterable[Path]) -> CgroupSession:
        """The session whose directories are ``dirs`` (for the keeper)."""
        self = cls.__new__(cls)
        self.dirs, self._lock, self._pool, self._counter = {}, threading.Lock(), {}, 0
        self._keeper, self._v2_controllers, self._want_keeper, self._created = None, (), False, True
        self._v2_kill = True
        by_mount = {h.mount: h for h in discover()}
        for d in dirs:
            hierarchy = next((h for m, h in by_mount.items() if d.is_relative_to(m)), None)
            if hierarchy is not None:
                self.dirs[hierarchy.key] = (hierarchy, d)
        return self

    # -- what this session can do --------------------------------------------------

    @property
    def holds(self) -> bool:
        """Can a command be held (and killed whole)?"""
        return bool(self.dirs)

    def version_of(self, what: str) -> int | None:
        """Where ``pids.max``/memory limits go (``"pids"``/``"memory"``), or ``None``."""
        if what in self._v2_controllers:
            return 2
        return 1 if what in self.dirs else None

    def describe(self) -> str:
        return ", ".join(f"{h.key} ({d})" for h, d in self.dirs.values()) or "none"

    # -- command cgroups -------------------------------------------------------------

    def _hierarchies_for(self, limits: Limits) -> list[tuple[Hierarchy, Path]]:
        """As few hierarchies as hold the command, kill it whole and carry ``limits``:
        each one costs a move (v1) per command."""
        keys: list[str] = []
        if "pids" in limits_wanted(limits) and self.version_of("pids") == 1:
            keys.append("pids")
        if "memory" in limits_wanted(limits) and self.version_of("memory") == 1:
            keys.append("memory")
        v2_limits = any(self.version_of(c) == 2 for c in limits_wanted(limits))
        v1_holder = next((k for k in ("freezer", "pids") if k in self.dirs), None)
        if "v2" in self.dirs and (v2_limits or v1_holder is None):
            keys.append("v2")  # joined after fork (an extra exec), so only when needed
        if v1_holder is not None and ("v2" not in keys or not self._v2_kill):
            # freezer: v1 has no cgroup.kill; freezing first keeps forks from racing the kill
            keys.append(v1_holder)
        return [self.dirs[k] for k in dict.fromkeys(keys)]

    def command(self, limits: Limits | None = None) -> CommandCgroup:
        """A command cgroup with ``limits``: an idle one from the pool, else a new one."""
        limits = limits or Limits()
        with self._lock:
            if not self._created:
                self._create()
            idle = self._pool.get(limits)
            if idle:
                return idle.pop()
            self._counter += 1
            name = f"cmd-{self._counter}"
        group = CommandCgroup((), limits)
        written: set[str] = set()
        try:
            for hierarchy, session in self._hierarchies_for(limits):
                path = session / name
                path.mkdir()
                group.dirs = (*group.dirs, (hierarchy, path))
                for key, value in _settings(hierarchy, path, limits):
                    _write(path / key, value)
                    written.add(key.split(".")[0])
            wanted = limits_wanted(limits)
            if wanted - written:  # never a command cgroup without the limit it was asked for
                raise OSError(errno.ENOTSUP, f"no {'/'.join(sorted(wanted - written))} controller in {self.describe()}")
        except BaseException:
            group.remove()
            raise
        return group

    def release(self, group: CommandCgroup) -> None:
        """After the command: kill what is left; keep the (now empty) cgroup for reuse."""
        group.kill(signal.SIGKILL)
        with self._lock:
            idle = self._pool.setdefault(group.limits, [])
            if group.empty() and len(idle) < _POOL_PER_LIMITS and self._created:
                idle.append(group)
                return
        group.remove()

    def _children(self) -> Iterator[CommandCgroup]:
        names: set[str] = set()
        for _, session in self.dirs.values():
            with contextlib.suppress(OSError):
                names.update(p.name for p in session.iterdir() if p.is_dir())
        for name in sorted(names):
            yield CommandCgroup((h, s / name) for h, s in self.dirs.values() if (s / name).is_dir())

    def purge(self) -> None:
        """Kill every command of this session and remove every directory of it."""
        v2 = self.dirs.get("v2")
        if v2 is not None and (v2[1] / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(v2[1] / "cgroup.kill", "1")  # the whole subtree at once
        for group in self._children():
            group.remove()
        for _, session in self.dirs.values():
            _rmdir(session)

    def close(self) -> None:
        with self._lock:
            idle = [group for groups in self._pool.values() for group in groups]
            self._pool.clear()
            created, self._created = self._created, False
        for group in idle:
            group.remove()  # closes the fds it kept
        if created:
            self.purge()
        if self._keeper is not None:
            self._keeper.stop()
            self._keeper = None
        atexit.unregister(self.close)


def limits_wanted(limits: Limits) -> set[str]:
    """The controllers ``limits`` needs."""
    return {name for name, value in (("pids", limits.pids_max), ("memory", limits.memory_max)) if value is not None}


def _settings(hierarchy: Hierarchy, path: Path, limits: Limits) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if limits.pids_max is not None and (path / "pids.max").exists():
        out.append(("pids.max", str(limits.pids_max)))
    if limits.memory_max is not None:
        if hierarchy.version == 2 and (path / "memory.max").exists():
            out.append(("memory.max", str(limits.memory_max)))
            if (path / "memory.swap.max").exists():
                out.append(("memory.swap.max", "0"))  # or a hog just swaps
        elif hierarchy.version == 1 and (path / "memory.limit_in_bytes").exists():
            out.append(("memory.limit_in_bytes", str(limits.memory_max)))
            if (path / "memory.memsw.limit_in_bytes").exists():
                # memory + swap, written after the plain limit (it must stay >= it)
                out.append(("memory.memsw.limit_in_bytes", str(limits.memory_max)))
    return out


def no_cgroup_reason() -> str:
    """Why no cgroup can hold a command here (for the runners' declared gaps)."""
    if os.geteuid() != 0:
        return (
            f"no cgroup is writable by uid {os.geteuid()} (cgroups are not delegated to this user; "
            "run as root or inside a delegated cgroup, e.g. systemd-run --user --scope -p Delegate=yes)"
        )
    return "no writable cgroup (v1 pids/freezer/memory or v2) was found for this process"


@functools.cache
def _shell(name: str) -> str | None:
    return shutil.which(name)


def join_args(fds: Sequence[int]) -> list[str]:
    """``sh -c JOIN_SCRIPT`` with the ``cgroup.procs`` fds, ending with ``--``.

    POSIX only promises redirections of fds 0-9 (dash refuses more): bash, which
    takes any fd, is used when a fd is above 9.  Raises OSError without a shell.
    """
    shell = _shell("sh") if max(fds, default=0) <= 9 else _shell("bash")
    if shell is None:
        raise OSError(errno.ENOENT, "no shell (sh, or bash for fds above 9) to join the command's cgroup")
    return [shell, "-c", JOIN_SCRIPT, "dsh-cgroup-join", *(str(fd) for fd in fds), "--"]
