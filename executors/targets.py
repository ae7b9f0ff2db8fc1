"""What the subprocess service drives: a local child in its own session, or a
process a runner started elsewhere, behind the one ``ProcessTarget`` interface
the pump uses (signal the tree, wait, reap)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable

from dsh.executors import portable, proctree
from dsh.executors.pump import ProcessTarget
from dsh.executors.watchdog import OrphanKiller
from dsh.sandbox.runner import ExitStatus, LocalLaunch, RemoteLaunch, RemoteProcess

_REAP_WAIT_S = 5.0


class LocalTarget(ProcessTarget):
    """A local child in its own session."""

    def __init__(self, popen: subprocess.Popen[bytes], launch: LocalLaunch, orphan_killer: OrphanKiller) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.leader: int = popen.pid
        self.pgid: int = popen.pid  # start_new_session: the leader's pid is the group id
        self.launch = launch
        self.orphan_killer = orphan_killer
        self._exit = portable.ExitWatch(self.leader)
        self.exit_fd: int | None = self._exit.fd
        self._reaped = False
        self._lock = threading.Lock()
        self._tree: dict[int, proctree.Start] = {}  # descendants seen while killing

    def signal_tree(self, sig: int, *, snapshot: bool = False) -> None:
        with self._lock:
            if self._reaped:
                return  # the group id may belong to someone else now
            if snapshot:
                self._tree.update(proctree.descendants(self.leader))
            for pid, start in self._tree.items():
                proctree.signal_same(pid, start, sig, skip_pgid=self.pgid)
            if self.launch.kill_tree is not None:
                try:
                    self.launch.kill_tree(self.leader, sig)
                except Exception:
                    pass  # the process-group kill below still happens
            try:
                os.killpg(self.pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def leader_status(self) -> ExitStatus | None:
        # Not reaped (where waitid exists): its pid, the group id, cannot be
        # reused while we still signal the group.
        return self._exit.status()

    def wait_exit(self, timeout: float) -> ExitStatus | None:
        raise NotImplementedError  # local targets are woken by their exit fd

    def command_status(self, status: ExitStatus, stderr: Callable[[], bytes]) -> ExitStatus:
        if self.launch.exit_status is None:
            return status
        return self.launch.exit_status(status, stderr)

    def finish(self) -> None:
        """Reap the leader and every orphan left in the group, then unregister."""
        with self._lock:
            self.popen.wait()
            self._reaped = True
        if self.exit_fd is not None:
            self._exit.close()
            self.exit_fd = None
        give_up = time.monotonic() + _REAP_WAIT_S
        while time.monotonic() < give_up:
            try:
                os.killpg(self.pgid, 0)
            except (ProcessLookupError, PermissionError):
                break  # the group is empty
            try:
                if os.waitpid(-self.pgid, os.WNOHANG)[0]:
                    continue
            except ChildProcessError:
                pass  # members left are not our children (yet); they were SIGKILLed
            time.sleep(0.005)
        # Descendants that left the group and came back to us as orphans.
        pending = dict(self._tree)
        while pending and time.monotonic() < give_up:
            pending = {p: s for p, s in pending.items() if not proctree.reap_adopted(p, s)}
            if pending:
                time.sleep(0.005)
        self.orphan_killer.unregister(self.pgid)
        if self.launch.cleanup is not None:
            self.launch.cleanup()


class RemoteTarget(ProcessTarget):
    """A ``RemoteProcess`` driven like a local one."""

    exit_fd = None

    def __init__(self, remote: RemoteProcess, launch: RemoteLaunch) -> None:
        self.remote = remote
        self.launch = launch
        self.pid = None

    def signal_tree(self, sig: int, *, snapshot: bool = False) -> None:
        try:
            self.remote.kill(sig)
        except Exception:
            pass  # a remote that is already gone has nothing left to kill

    def leader_status(self) -> ExitStatus | None:
        return self.remote.wait(0)

    def wait_exit(self, timeout: float) -> ExitStatus | None:
        return self.remote.wait(timeout)

    def finish(self) -> None:
        try:
            self.remote.close()
        finally:
            if self.launch.cleanup is not None:
                self.launch.cleanup()
