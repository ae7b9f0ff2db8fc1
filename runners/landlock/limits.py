"""Resource limits for commands the Landlock runner starts.

rlimits are per process, not per thread, so they cannot be set on the
spawner thread without touching the whole interpreter.  Two tools instead:

- a per-command **cgroup v1** (``pids`` for ``max_processes``, ``memory`` for
  ``max_memory_bytes``) when this process may create child cgroups (root here;
  RLIMIT_NPROC is ignored for root, so a fork bomb needs ``pids.max``).  cgroup v1
  membership is per thread: the caller moves the spawner thread's tid into the
  command's cgroup, the child is born inside, and the thread moves back.
- util-linux ``prlimit --fsize/--as/--nproc -- ARGV`` for what no cgroup covers
  (the exact argv follows ``--`` unchanged).

``wall_time_s`` is a watchdog timer that kills the cgroup (or the process group).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import itertools
import os
import shutil
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dsh.runners.landlock.rules import Gap
from dsh.sandbox.policy import ResourceLimits

DEGRADE_LIMITS = "landlock-limits"
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup v1 path for ``controller`` (``/proc/self/cgroup``)."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as table:
            for line in table:
                _hid, controllers, path = line.rstrip("\n").split(":", 2)
                if controller in controllers.split(","):
                    return path
    except OSError:
        return None
    return None


class CgroupSession:
    """The runner's cgroup v1 directories, one per usable controller."""

    def __init__(self, controllers: tuple[str, ...] = ("pids", "memory")) -> None:
        self.home: dict[str, Path] = {}  # controller -> where this process lives
        self.session: dict[str, Path] = {}  # controller -> our session directory
        tag = f"dsh-landlock-{os.getpid()}-{id(self):x}"
        for controller in controllers:
            rel = _own_cgroup(controller)
            if rel is None:
                continue
            home = _CGROUP_ROOT / controller / rel.lstrip("/")
            session = home / tag
            try:
                session.mkdir(exist_ok=True)
            except OSError:
                continue  # not delegated to us (non-root, read-only cgroupfs)
            self.home[controller] = home
            self.session[controller] = session
        atexit.register(self.close)

    def has(self, controller: str) -> bool:
        return controller in self.session

    def new_command(self, settings: Mapping[str, Mapping[str, str]]) -> CommandCgroup:
        name = f"cmd-{next(_counter)}"
        dirs: dict[str, Path] = {}
        try:
            for controller, values in settings.items():
                path = self.session[controller] / name
                path.mkdir()
                dirs[controller] = path
                for key, value in values.items():
                    (path / key).write_text(value)
        except BaseException:
            CommandCgroup(dirs, self.home).remove()
            raise
        return CommandCgroup(dirs, self.home)

    def close(self) -> None:
        for path in self.session.values():
            with contextlib.suppress(OSError):
                path.rmdir()


@dataclass
class CommandCgroup:
    dirs: dict[str, Path]
    home: Mapping[str, Path]

    def open_moves(self) -> tuple[list[int], list[int]]:
        """fds of this cgroup's ``tasks`` files and of the home ones.

        Opened here (unrestricted) so the restricted spawner thread can move
        *itself* in and out with ``write()``: Landlock checks opens, not
        writes, and moving inside the spawn job keeps other spawns out.
        """
        enter: list[int] = []
        leave: list[int] = []
        try:
            for controller, path in self.dirs.items():
                enter.append(os.open(path / "tasks", os.O_WRONLY | os.O_CLOEXEC))
                leave.append(os.open(self.home[controller] / "tasks", os.O_WRONLY | os.O_CLOEXEC))
        except BaseException:
            for fd in enter + leave:
                os.close(fd)
            raise
        return enter, leave

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.dirs.values():
            with contextlib.suppress(OSError):
                found.update(int(x) for x in (path / "cgroup.procs").read_text().split())
        return found

    def kill(self, sig: int) -> None:
        """Signal every process inside; for SIGKILL repeat until it is empty
        (a fork bomb keeps forking between reads; pids.max bounds it)."""
        for _attempt in range(200 if sig == signal.SIGKILL else 1):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            if sig == signal.SIGKILL:
                time.sleep(0.005)

    def remove(self) -> None:
        self.kill(signal.SIGKILL)
        for path in self.dirs.values():
            for _attempt in range(100):  # rmdir fails (EBUSY) until the dead are reaped
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


@dataclass(frozen=True)
class LimitPlan:
    prlimit: tuple[str, ...] = ()  # argv prefix ending with "--", or ()
    cgroup: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    wall_time_s: float | None = None
    described: tuple[str, ...] = ()
    gaps: tuple[Gap, ...] = ()

    @property
    def needs_cgroup(self) -> bool:
        return bool(self.cgroup)


DEGRADE_ESCAPE = "landlock-process-escape"
_ESCAPE_GAP = Gap(
    "a process that leaves the command's session (setsid, a daemon) can outlive the command: "
    "there is no writable pids cgroup to hold and kill the command's processes",
    DEGRADE_ESCAPE,
)


def plan_containment(plan: LimitPlan, cgroups: CgroupSession | None) -> LimitPlan:
    """Hold every process of a constrained command in a pids cgroup when one is usable.

    Landlock has no pid namespace: without a cgroup, a process that calls
    setsid() escapes the process group the executor kills.  With one, the
    launch's cleanup and kill_tree kill the whole cgroup.  Otherwise the gap is
    declared (``landlock-process-escape``).
    """
    if cgroups is not None and cgroups.has("pids"):
        if "pids" in plan.cgroup:
            return plan
        cgroup = {**{k: dict(v) for k, v in plan.cgroup.items()}, "pids": {}}
        return dataclasses.replace(plan, cgroup=cgroup)
    return dataclasses.replace(plan, gaps=(*plan.gaps, _ESCAPE_GAP))


def plan_limits(limits: ResourceLimits, cgroups: CgroupSession | None, *, is_root: bool) -> LimitPlan:
    if limits.is_empty():
        return LimitPlan()
    prlimit_bin = shutil.which("prlimit")
    has_pids = cgroups is not None and cgroups.has("pids")
    has_memory = cgroups is not None and cgroups.has("memory")
    flags: list[str] = []
    cgroup: dict[str, dict[str, str]] = {}
    described: list[str] = []
    gaps: list[Gap] = []

    def missing(what: str, why: str) -> None:
        gaps.append(Gap(f"{what} is not enforced: {why}", DEGRADE_LIMITS))

    if limits.max_processes is not None:
        if has_pids:
            cgroup.setdefault("pids", {})["pids.max"] = str(limits.max_processes)
            described.append(f"max_processes={limits.max_processes} (cgroup v1 pids.max)")
        elif prlimit_bin and not is_root:
            flags.append(f"--nproc={limits.max_processes}")
            described.append(f"max_processes={limits.max_processes} (RLIMIT_NPROC: counts every process of this user)")
        else:
            missing(
                f"max_processes={limits.max_processes}",
                "no writable pids cgroup, and RLIMIT_NPROC is ignored for root"
                if is_root
                else "no writable pids cgroup and no prlimit binary",
            )
    if limits.max_memory_bytes is not None:
        if has_memory:
            memory = {"memory.limit_in_bytes": str(limits.max_memory_bytes)}
            assert cgroups is not None
            if (cgroups.session["memory"] / "memory.memsw.limit_in_bytes").exists():
                # Also cap memory+swap, or a hog just swaps (written after the plain limit).
                memory["memory.memsw.limit_in_bytes"] = str(limits.max_memory_bytes)
            cgroup["memory"] = memory
            described.append(f"max_memory_bytes={limits.max_memory_bytes} (cgroup v1 memory limit)")
        elif prlimit_bin:
            flags.append(f"--as={limits.max_memory_bytes}")
            described.append(f"max_memory_bytes={limits.max_memory_bytes} (RLIMIT_AS, per process)")
        else:
            missing(
                f"max_memory_bytes={limits.max_memory_bytes}",
                "no memory cgroup and no prlimit binary",
            )
    if limits.max_file_size_bytes is not None:
        if prlimit_bin:
            flags.append(f"--fsize={limits.max_file_size_bytes}")
            described.append(f"max_file_size_bytes={limits.max_file_size_bytes} (RLIMIT_FSIZE)")
        else:
            missing(
                f"max_file_size_bytes={limits.max_file_size_bytes}",
                "no prlimit binary (util-linux)",
            )
    if limits.wall_time_s is not None:
        if has_pids:
            cgroup.setdefault("pids", {})  # so the watchdog kills the whole tree
            described.append(f"wall_time_s={limits.wall_time_s} (watchdog kills the command's cgroup)")
        else:
            described.append(
                f"wall_time_s={limits.wall_time_s} (watchdog kills the process group; processes that left it survive)"
            )
    prefix = (prlimit_bin, *flags, "--") if flags and prlimit_bin else ()
    return LimitPlan(tuple(prefix), cgroup, limits.wall_time_s, tuple(described), tuple(gaps))


class Watchdog:
    """Kills a command after ``wall_time_s``; cancelled by the launch's cleanup."""

    def __init__(self, seconds: float, cgroup: CommandCgroup | None, pid: int | None) -> None:
        self.fired = False
        self._cgroup = cgroup
        self._pid = pid
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        if self._cgroup is not None:
            self._cgroup.kill(signal.SIGKILL)
        elif self._pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(self._pid) == self._pid:
                    os.killpg(self._pid, signal.SIGKILL)
                else:
                    os.kill(self._pid, signal.SIGKILL)

    def cancel(self) -> None:
        self._timer.cancel()
