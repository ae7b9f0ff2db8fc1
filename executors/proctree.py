"""Process-tree snapshots from /proc, for processes that left the command's group.

Killing the process group covers double forks; a descendant that called
``setsid`` (bubblewrap's ``--new-session`` child, for one) is outside it.  When
a command is being killed we snapshot its descendants while the leader is
still alive, signal the ones outside the group, and later reap those that were
re-parented to us.  Every pid is checked against its start time, so a reused
pid is never signalled or reaped.
"""

from __future__ import annotations

import os

Start = int  # /proc/<pid>/stat field 22: start time in clock ticks since boot


def stat(pid: int) -> tuple[str, int, int, Start] | None:
    """(state, ppid, pgid, start time) of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])


def descendants(root: int) -> dict[int, Start]:
    """Every live descendant of ``root`` now, with its start time."""
    children: dict[int, list[tuple[int, Start]]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    for entry in entries:
        if not entry.isdigit():
            continue
        info = stat(int(entry))
        if info is not None:
            children.setdefault(info[1], []).append((int(entry), info[3]))
    out: dict[int, Start] = {}
    todo = [root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            if pid not in out:
                out[pid] = start
                todo.append(pid)
    return out


def signal_same(pid: int, start: Start, sig: int, *, skip_pgid: int | None = None) -> None:
    """Send ``sig`` to ``pid`` only if it is still the process we saw (and is
    not in ``skip_pgid``, which the caller signals as a group)."""
    info = stat(pid)
    if info is None or info[3] != start or info[0] == "Z" or info[2] == skip_pgid:
        return
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def reap_adopted(pid: int, start: Start) -> bool:
    """Reap ``pid`` if it is a zombie re-parented to us; True once it is gone
    or is not ours to reap."""
    info = stat(pid)
    if info is None or info[3] != start or info[1] != os.getpid():
        return True
    if info[0] != "Z":
        return False
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return True
