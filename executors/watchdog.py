"""The orphan killer: the executor's death must not leave its commands running.

One tiny process per subprocess service (started at the first spawn) holds the
read end of a pipe from us.  We write ``<pgid>`` when a command starts and
``-<pgid>`` once its group is empty and reaped.  When the pipe hits EOF -- we
closed it, or we died, even by SIGKILL -- it SIGKILLs every group still
registered, and every descendant of its leader that left the group (found
through ``/proc/PID/task/*/children`` while the leader still lives).  Lines
are processed in order, so an unregistration written before we died is always
seen before the EOF.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading

from dsh.sandbox.helper_env import helper_env

_ORPHAN_KILLER = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
groups = set()
for line in sys.stdin.buffer:
    word = line.strip()
    if word.startswith(b"-"):
        groups.discard(int(word[1:]))
    elif word:
        groups.add(int(word))
def children(pid):
    out = []
    try:
        for task in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                    out += [int(p) for p in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out
def tree(pid):
    seen, todo = [], children(pid)
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.append(p)
            todo += children(p)
    return seen
for pgid in groups:
    # Descendants that left the group (setsid, a terminal session's jobs) are
    # found through the live parent links first, stopped so none forks away,
    # then killed with the group.
    found = tree(pgid)
    for pid in found:
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
    found += [p for p in tree(pgid) if p not in found]
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


class OrphanKiller:
    """A tiny process that SIGKILLs registered process groups when we die."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._registered: set[int] = set()

    def _send(self, line: str) -> None:
        with self._lock:
            if self._proc is None:
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _ORPHAN_KILLER],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    env=helper_env(),  # needs nothing of ours; loader variables stay out
                    start_new_session=True,  # a Ctrl-C to our group must not kill it
                )
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write(line.encode() + b"\n")
                self._proc.stdin.flush()
            except OSError:
                pass  # it died: processes still get killed by close()

    def register(self, pgid: int) -> None:
        with self._lock:
            self._registered.add(pgid)
        self._send(str(pgid))

    def unregister(self, pgid: int) -> None:
        with self._lock:
            self._registered.discard(pgid)
        self._send(f"-{pgid}")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
            pending = bool(self._registered)
        if proc is None:
            return
        assert proc.stdin is not None
        try:
            proc.stdin.close()  # EOF: it kills what is still registered and exits
        except OSError:
            pass
        if not pending:
            # Nothing left to kill: it only exits.  Waiting for that cost every
            # CLI run its interpreter's shutdown; a thread reaps it instead.
            threading.Thread(target=proc.wait, name="dsh-orphan-killer-reap", daemon=True).start()
            return
        if not _exited_within(proc, 10.0):
            proc.kill()
        proc.wait()


def _exited_within(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Whether ``proc`` exits within ``timeout_s``, woken by its exit itself:
    ``Popen.wait(timeout=...)`` polls with sleeps, which every CLI run paid on
    its way out."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd (macOS, old kernels), or reaped already
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)
