"""Cgroups for the Linux runners: a session cgroup per runner, one cgroup per command.

Wherever this process may create child cgroups of its own cgroup (v1 or v2, see
``cgroupfs``), a runner gets a session: limits (``pids.max``; ``memory.max`` +
``memory.swap.max = 0`` on v2, ``memory.limit_in_bytes`` (+ memsw) on v1), a
cgroup per command that holds every process it starts, and a pool of idle
command cgroups per limit set (creating one is on every command's path; an
empty one is as good as new).

The session's directories are made with its first command, together with a
keeper process (``keeper``) that empties and removes them when this process
dies: containment does not depend on the supervisor surviving.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import signal
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from dsh.runners.linux.cgroupfs import (
    JOIN_SCRIPT,
    CommandCgroup,
    Hierarchy,
    Limits,
    discover,
    join_args,
    join_shells,
    rmdir_when_empty,
    write_value,
)

if TYPE_CHECKING:
    from dsh.runners.linux.keeper import Keeper

__all__ = [
    "JOIN_SCRIPT", "CgroupSession", "CommandCgroup", "Hierarchy", "Limits", "discover", "join_args", "join_shells",
]

_POOL_PER_LIMITS = 4


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
                rmdir_when_empty(session)
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
                        write_value(session / "cgroup.subtree_control", f"+{name}")
            if self._want_keeper:
                from dsh.runners.linux.keeper import Keeper

                # Without a keeper the command would not be held if this process died: fail closed.
                self._keeper = Keeper.start(made)
        except BaseException:
            for path in made:
                rmdir_when_empty(path)
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
        return 1 if self._v1_key(what) is not None else None

    def _v1_key(self, controller: str) -> str | None:
        """The session directory of the v1 hierarchy that carries ``controller``
        (co-mounted controllers share one hierarchy)."""
        return next((k for k, (h, _) in self.dirs.items() if h.version == 1 and controller in h.controllers), None)

    def describe_for(self, limits: Limits | None = None) -> str:
        """The hierarchies a command with ``limits`` joins, e.g. ``cgroup v1 freezer``."""
        keys = [h.key for h, _ in self._hierarchies_for(limits or Limits())]
        return ", ".join("cgroup v2" if k == "v2" else f"cgroup v1 {k}" for k in keys) or "none"

    def describe(self) -> str:
        return ", ".join(f"{h.key} ({d})" for h, d in self.dirs.values()) or "none"

    # -- command cgroups -------------------------------------------------------------

    def _hierarchies_for(self, limits: Limits) -> list[tuple[Hierarchy, Path]]:
        """As few hierarchies as hold the command, kill it whole and carry ``limits``:
        each one costs a move (v1) per command."""
        wanted = limits_wanted(limits)
        keys = [k for c in sorted(wanted) if self.version_of(c) == 1 and (k := self._v1_key(c)) is not None]
        v2_limits = any(self.version_of(c) == 2 for c in wanted)
        v1_holder = self._v1_key("freezer") or self._v1_key("pids")
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
                    write_value(path / key, value)
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
                write_value(v2[1] / "cgroup.kill", "1")  # the whole subtree at once
        for group in self._children():
            group.remove()
        for _, session in self.dirs.values():
            rmdir_when_empty(session)

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
