"""Reaping the pid 1 of a finished bwrap sandbox.

bwrap's monitor exits as soon as its pid 1 reports the command's status, often
before pid 1 itself is gone.  pid 1 then comes back to the nearest child
subreaper (the supervisor, once it has started a command) and dies there: one
zombie per sandbox unless someone reaps it, and zombies count against the
user's ``RLIMIT_NPROC`` for as long as the supervisor lives.  bwrap reports
pid 1's host pid on ``--info-fd``; it is reaped through a pidfd, and only when
it is this process's child and the init of bwrap's pid namespace, so a
recycled pid is never reaped.
"""

from __future__ import annotations

import contextlib
import json
import os
import select

#: How long to wait for pid 1 to die once bwrap's monitor is gone (its
#: parent-death signal is SIGKILL: this is slack).
REAP_WAIT_S = 2.0


def sandbox_init(info: bytes) -> tuple[int, int | None] | None:
    """``(child-pid, pid-namespace inode)`` from bwrap's complete info JSON."""
    try:
        data = json.loads(info.decode())
        pid = data["child-pid"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    ns = data.get("pid-namespace")
    if not isinstance(pid, int) or pid <= 1:
        return None
    return pid, ns if isinstance(ns, int) else None


def read_ready(fd: int) -> bytes:
    """What bwrap has written so far to one of its (non-blocking) report pipes."""
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EAGAIN: nothing more was written
            return data
        if not chunk:
            return data
        data += chunk


def _is_our_init(pid: int, pid_ns: int | None) -> bool:
    """Is ``pid`` (held by a pidfd) a child of this process and pid 1 of bwrap's namespace?

    A dead init has no namespace links left; then its ``NSpid`` line, which
    stays until it is reaped, is the evidence.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        with open(f"/proc/{pid}/status") as fh:
            nspid = next((ln.split()[1:] for ln in fh if ln.startswith("NSpid:")), [])
    except OSError:
        return False
    fields = stat[stat.rfind(b")") + 2:].split()
    if len(fields) < 2 or int(fields[1]) != os.getpid() or len(nspid) < 2 or nspid[-1] != "1":
        return False
    if pid_ns is not None and fields[0] != b"Z":
        try:
            return os.stat(f"/proc/{pid}/ns/pid").st_ino == pid_ns
        except OSError:
            return False
    return True


def reap_init(pid: int, pid_ns: int | None) -> None:
    """Reap the sandbox's pid 1 if it came back to this process; a no-op otherwise."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return  # reaped already (by bwrap's monitor)
    try:
        if not _is_our_init(pid, pid_ns):
            return
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll(int(REAP_WAIT_S * 1000))
        with contextlib.suppress(OSError):
            os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG)
    finally:
        os.close(fd)
