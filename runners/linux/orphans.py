"""Reaping the processes a helper daemonized that end up as this process's children.

The executor makes this process a child subreaper, so the processes a helper
daemonizes (runsc's sandbox and gofer, and what they start) become its
children when the helper exits.  Nothing else waits for them: each one that
ends stays a zombie, counted against the user's process limit, until this
process exits.  A long session (a server, a conformance run) that starts many
sandboxes then runs out of processes.  So whoever tears such a tree down
snapshots it first and reaps what of it became ours.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable

#: A process as /proc/<pid>/stat names it: (pid, start time in clock ticks),
#: so that a pid reused by another process is never taken for it.
Proc = tuple[int, int]


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of ``pid``, or ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Make this process the parent of what its helpers daemonize, so that it
    reaps them (``reap_tree``).  Otherwise they go to the nearest subreaper
    above it, which may never reap them (a test runner, an agent's harness):
    their zombies then outlive them, and whatever waits for them to be gone
    (``runsc delete``) waits out its timeout."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), ``None`` once it is gone:
    with the pid, names a process even after its pid is reused."""
    stat = _stat(pid)
    return stat[2] if stat is not None else None


def live_start_time(pid: int) -> int | None:
    """``start_time`` of a process that still runs: ``None`` for a zombie too
    (dead, but not reaped yet where its new parent never reaps)."""
    stat = _stat(pid)
    return stat[2] if stat is not None and stat[0] not in ("Z", "X") else None


def real_uid(pid: int) -> int | None:
    """``pid``'s real uid (``Uid:`` in its status), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("Uid:"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def processes_naming(word: str) -> list[int]:
    """The processes of this uid with ``word`` as one of their arguments: what
    a helper daemonized before saying who it started (a ``runsc create`` that
    timed out leaves a sandbox and a gofer naming its bundle)."""
    wanted, uid, found = os.fsencode(word), os.getuid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if any(a == wanted or a.endswith(b"=" + wanted) for a in args):
            found.append(int(name))
    return found


def process_tree(roots: Iterable[int]) -> frozenset[Proc]:
    """``roots`` and every process below them, as they are now."""
    parents: dict[int, list[int]] = {}
    started: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        found = _stat(int(name))
        if found is not None:
            parents.setdefault(found[1], []).append(int(name))
            started[int(name)] = found[2]
    seen: set[int] = set()
    frontier = [pid for pid in roots if pid in started]
    while frontier:
        pid = frontier.pop()
        if pid in seen:
            continue
        seen.add(pid)
        frontier += [c for c in parents.get(pid, ()) if c in started]
    return frozenset((pid, started[pid]) for pid in seen)


def reap_tree(tree: Iterable[Proc], timeout: float) -> None:
    """Wait (up to ``timeout`` seconds) for each process of ``tree`` that is
    or becomes a child of this process, and reap it.  Processes that belong
    to another parent, or outlive the timeout, are left alone."""
    left = set(tree)
    me = os.getpid()
    deadline = time.monotonic() + timeout
    while left:
        for proc in list(left):
            pid, start = proc
            found = _stat(pid)
            if found is None or found[2] != start:
                left.discard(proc)  # gone (its own parent reaped it), or the pid is another process now
                continue
            state, parent, _start = found
            if state in ("Z", "X"):
                # Ended.  Ours to reap; another parent's (a subreaper above this
                # process, which took it first) is that parent's to reap, and
                # waiting for it to vanish would wait out the timeout.
                if parent == me:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid, os.WNOHANG)
                left.discard(proc)
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.02)


def kill_tree(tree: Iterable[Proc]) -> None:
    """SIGKILL each process of ``tree`` that still runs.  Through a pidfd taken
    before its start time is checked, so a pid that another process took
    meanwhile is never signalled."""
    import signal

    for pid, start in tree:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue  # gone
        try:
            found = _stat(pid)
            if found is not None and found[2] == start and found[0] not in ("Z", "X"):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)
