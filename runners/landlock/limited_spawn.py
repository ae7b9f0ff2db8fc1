"""One Landlock command's limits: its cgroup (joined on the spawner thread for
v1, after fork for v2), its wall-time killer and its teardown."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

from dsh.runners.landlock.limits import (
    LimitPlan,
    WallTimeKiller,
)
from dsh.runners.landlock.spawner import SpawnerThread
from dsh.runners.linux.cgroups import CgroupSession, CommandCgroup
from dsh.runners.linux.env_hop import EnvHop


class LimitedSpawn:
    """One command's cgroup, wall-time killer and teardown.

    The cgroup is taken when the launch is prepared.  v1 membership is per
    thread: the spawner thread moves itself in, forks (the child is born
    inside) and moves back.  v2 membership is per process: the child joins
    after fork through ``join_fds`` (``JOIN_SCRIPT`` in front of the argv).
    """

    def __init__(self, spawner: SpawnerThread, cgroups: CgroupSession | None, limits: LimitPlan) -> None:
        self._spawner = spawner
        self._cgroups = cgroups
        self._limits = limits
        self.cgroup: CommandCgroup | None = None
        self.wall_time_killer: WallTimeKiller | None = None
        self.join_fds: list[int] = []
        self.hop: EnvHop | None = None
        if cgroups is not None:
            self.cgroup = cgroups.command(limits.cgroup)
            if self.cgroup.per_process:
                try:
                    self.join_fds = self.cgroup.open_procs()
                except BaseException:
                    cgroups.release(self.cgroup)
                    raise

    def spawn_in(self, fn: Callable[[], Any]) -> Any:
        try:
            if self.cgroup is None or self.join_fds:
                result = self._spawner.call(fn)
            else:
                result = self._spawn_in_cgroup(self.cgroup, fn)
        finally:
            self._close_join_fds()  # the child has its copies (or never ran)
            if self.hop is not None:
                self.hop.close()
        if self._limits.wall_time_s is not None:
            pid = getattr(result, "pid", None)
            self.wall_time_killer = WallTimeKiller(
                self._limits.wall_time_s, self.cgroup, pid if isinstance(pid, int) else None
            )
        return result

    def _close_join_fds(self) -> None:
        fds, self.join_fds = self.join_fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _spawn_in_cgroup(self, cgroup: CommandCgroup, fn: Callable[[], Any]) -> Any:
        enter, leave = cgroup.thread_moves()

        def job() -> Any:
            tid = str(threading.get_native_id()).encode()
            for fd in enter:
                os.write(fd, tid)
            try:
                return fn()
            finally:
                for fd in leave:
                    os.write(fd, tid)

        return self._spawner.call(job)

    def kill_tree(self, pid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
        if self.cgroup is not None:
            self.cgroup.kill(sig)

    def cleanup(self) -> None:
        if self.wall_time_killer is not None:
            self.wall_time_killer.cancel()
        self._close_join_fds()
        if self.hop is not None:
            self.hop.close()
        if self.cgroup is not None and self._cgroups is not None:
            self._cgroups.release(self.cgroup)  # kills what is left (double forks, setsid) first
            self.cgroup = None

    @property
    def timed_out(self) -> bool:
        return self.wall_time_killer is not None and self.wall_time_killer.fired

