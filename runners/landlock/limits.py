"""Resource limits and containment for commands the Landlock runner starts.

rlimits are per process, not per thread, so they cannot be set on the
spawner thread without touching the whole interpreter.  Two tools instead:

- a per-command cgroup (``dsh.runners.linux.cgroups``, v1 or v2): ``pids.max``
  for ``max_processes`` (RLIMIT_NPROC is ignored for root), a memory limit for
  ``max_memory_bytes``; and, for every constrained command, a cgroup that holds
  every process it starts (it cannot write any ``cgroup.procs``: cgroupfs is
  outside its writable roots), killed whole at the end of the command and by
  the session's keeper if this process dies;
- util-linux ``prlimit --fsize/--as/--nproc -- ARGV`` for what no cgroup covers
  (the exact argv follows ``--`` unchanged).

``wall_time_s`` is a watchdog timer that kills the cgroup (or the process group).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
from dataclasses import dataclass

from dsh.runners.linux.cgroups import CgroupSession, CommandCgroup, Limits, no_cgroup_reason
from dsh.sandbox.host_tools import system_tool
from dsh.sandbox.policy import ResourceLimits
from dsh.sandbox.runner import Gap

DEGRADE_LIMITS = "landlock-limits"


@dataclass(frozen=True)
class LimitPlan:
    prlimit: tuple[str, ...] = ()  # argv prefix ending with "--", or ()
    cgroup: Limits | None = None  # the command's cgroup, when it gets one
    wall_time_s: float | None = None
    described: tuple[str, ...] = ()
    gaps: tuple[Gap, ...] = ()

    @property
    def needs_cgroup(self) -> bool:
        return self.cgroup is not None


DEGRADE_ESCAPE = "landlock-process-escape"


def _escape_gap(why: str) -> Gap:
    return Gap(
        DEGRADE_ESCAPE,
        "a process that leaves the command's session (setsid, a daemon) can outlive the command "
        f"and its supervisor: {why}",
    )


def plan_containment(plan: LimitPlan, cgroups: CgroupSession | None) -> LimitPlan:
    """Hold every process of a constrained command in a cgroup when one is usable.

    Landlock has no pid namespace: without a cgroup, a process that calls
    setsid() escapes the process group the executor kills.  With one, the
    launch's cleanup and kill_tree kill the whole cgroup.  Otherwise the gap is
    declared (``landlock-process-escape``).
    """
    if cgroups is not None and cgroups.holds:
        held = (
            f"containment: every process in a per-command cgroup ({cgroups.describe_for(plan.cgroup)}) it cannot leave "
            "(cgroupfs is outside its writable roots); killed whole when the command ends, and by a "
            "keeper process if the supervisor dies",
        )
        return dataclasses.replace(plan, cgroup=plan.cgroup or Limits(), described=plan.described + held)
    return dataclasses.replace(plan, gaps=(*plan.gaps, _escape_gap(no_cgroup_reason())))


def plan_limits(limits: ResourceLimits, cgroups: CgroupSession | None, *, is_root: bool) -> LimitPlan:
    if limits.is_empty():
        return LimitPlan()
    prlimit_bin = system_tool("prlimit")  # never the caller's PATH
    pids_v = cgroups.version_of("pids") if cgroups is not None else None
    memory_v = cgroups.version_of("memory") if cgroups is not None else None
    flags: list[str] = []
    cgroup: Limits | None = None
    described: list[str] = []
    gaps: list[Gap] = []

    def missing(what: str, why: str) -> None:
        gaps.append(Gap(DEGRADE_LIMITS, f"{what} is not enforced: {why}"))

    if limits.max_processes is not None:
        if pids_v is not None:
            cgroup = Limits(pids_max=limits.max_processes)
            described.append(f"max_processes={limits.max_processes} (cgroup v{pids_v} pids.max)")
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
        if memory_v is not None:
            cgroup = dataclasses.replace(cgroup or Limits(), memory_max=limits.max_memory_bytes)
            described.append(f"max_memory_bytes={limits.max_memory_bytes} (cgroup v{memory_v} memory limit)")
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
        if cgroups is not None and cgroups.holds:
            cgroup = cgroup or Limits()  # so the watchdog kills the whole tree
            described.append(f"wall_time_s={limits.wall_time_s} (watchdog kills the command's cgroup)")
        else:
            described.append(
                f"wall_time_s={limits.wall_time_s} (watchdog kills the process group; processes that left it survive)"
            )
    prefix = (prlimit_bin, *flags, "--") if flags and prlimit_bin else ()
    return LimitPlan(tuple(prefix), cgroup, limits.wall_time_s, tuple(described), tuple(gaps))


class WallTimeKiller:
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
