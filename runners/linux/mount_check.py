"""Check, from the host, the mounts a sandbox ended up with.

A tool that mounts by name can be led astray while it mounts.  bwrap turns
each ``--bind-fd`` back into a path before it binds it, and runsc's gofer
binds each source by path: a directory swapped for a *relative* symlink at
that moment sends both the source and the mount point through the link to
the same place, the tool's own identity check passes once the directory is
swapped back, and a writable bind lands beside the path the policy named.

So once the sandbox is set up, and before the command starts, every planned
mount is looked up in the sandbox's own mount table and reached from the
sandbox's root without following any symlink: it must be mounted at exactly
its path, be the directory the policy pinned, and be read-only (or of the
filesystem type) the plan says.  A mount that went elsewhere leaves its own
path without it, so checking each planned path also rules out strays.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass

Identity = tuple[int, int]

_O_PATH = getattr(os, "O_PATH", 0)
_STEP = _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class MountEntry:
    """One line of a mount table."""

    mount_id: int
    device: str  # major:minor
    root: str  # the mounted directory's path within its filesystem
    point: str  # where it is mounted, as the table's reader sees it
    read_only: bool
    fstype: str


def mount_table(mountinfo: str) -> list[MountEntry]:
    """Parse ``/proc/<pid>/mountinfo`` (lines it cannot read are skipped).

    The kernel escapes only space, tab, newline and backslash in a path, so a
    line is split on those bytes alone: ``str.split()`` and ``splitlines()``
    also split on characters a file name may hold (0x1c, U+0085, U+2028),
    which would cut a mount point short."""
    entries = []
    for line in mountinfo.split("\n"):
        fields = [f for f in line.split(" ") if f]
        try:
            dash = fields.index("-", 6)
            entries.append(MountEntry(
                mount_id=int(fields[0]),
                device=fields[2],
                root=unescape_field(fields[3]),
                point=unescape_field(fields[4]),
                read_only="ro" in fields[5].split(","),
                fstype=fields[dash + 1],
            ))
        except (ValueError, IndexError):
            continue
    return entries


def unescape_field(field: str) -> str:
    """A mountinfo path field (octal escapes for space, tab, newline, backslash)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


@dataclass(frozen=True)
class ExpectedMount:
    """A mount the plan puts at ``path`` (as the sandbox sees it)."""

    path: str
    identity: Identity | None = None  # (st_dev, st_ino) of what must be mounted there
    read_only: bool = False
    fstype: str | None = None
    #: Bound onto itself, and the sandbox shows the host's paths: then the
    #: host, where nothing is mounted, must see ``identity`` at ``path`` too.
    onto_itself: bool = False


def mount_id(fd: int) -> int | None:
    """The id of the mount ``fd`` lies on (``/proc/self/fdinfo``)."""
    try:
        with open(f"/proc/self/fdinfo/{fd}") as fh:
            for line in fh:
                if line.startswith("mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def open_in_root(root_fd: int, path: str) -> int:
    """An ``O_PATH`` fd of ``path`` below ``root_fd``, reached without
    following any symlink (``OSError`` names the first one met)."""
    fd = os.dup(root_fd)
    try:
        for part in [p for p in path.split("/") if p]:
            child = os.open(part, _STEP, dir_fd=fd)
            os.close(fd)
            fd = child
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise OSError(f"{part} is a symlink")
    except BaseException:
        os.close(fd)
        raise
    return fd


def mount_problem(pid: int, expected: Iterable[ExpectedMount]) -> str | None:
    """How the sandbox of process ``pid`` differs from ``expected``, or ``None``.

    Where one path is planned more than once, the last mount is the one on top."""
    last = {want.path: want for want in expected}
    if not last:
        return None
    try:
        with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
            table = {entry.mount_id: entry for entry in mount_table(fh.read())}
        root_fd = os.open(f"/proc/{pid}/root", _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        return f"the sandbox's mounts cannot be read ({exc.strerror or exc})"
    try:
        # The host's view before and after the sandbox's: a bind made on a
        # decoy that held the name only while the sandbox was looked at (a
        # directory exchanged in and out by the host) shows there.
        problem = _host_problem(last.values())
        for want in last.values():
            problem = problem or _one_problem(root_fd, table, want)
        return problem or _host_problem(last.values())
    finally:
        os.close(root_fd)


def _host_problem(expected: Iterable[ExpectedMount]) -> str | None:
    for want in expected:
        if not want.onto_itself or want.identity is None:
            continue
        try:
            info = os.lstat(want.path)
        except OSError as exc:
            return f"{want.path} cannot be found on the host ({exc.strerror or exc})"
        if (info.st_dev, info.st_ino) != want.identity:
            return f"{want.path} is another directory on the host than the one the sandbox mounted there"
    return None


def _one_problem(root_fd: int, table: dict[int, MountEntry], want: ExpectedMount) -> str | None:
    try:
        fd = open_in_root(root_fd, want.path)
    except OSError as exc:
        return f"{want.path} cannot be reached in the sandbox without a symlink ({exc.strerror or exc})"
    try:
        info = os.fstat(fd)
        entry = table.get(mount_id(fd) or -1)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    if entry is None or entry.point != want.path:
        return (f"{want.path} is not mounted at its own path in the sandbox (a symlink swapped in "
                "while it was mounted sends the mount elsewhere)")
    if want.identity is not None and (info.st_dev, info.st_ino) != want.identity:
        return f"{want.path}: the sandbox mounted another directory than the one resolved"
    if want.read_only and not entry.read_only:
        return f"{want.path} is writable in the sandbox, where it must be read-only"
    if want.fstype is not None and entry.fstype != want.fstype:
        return f"{want.path} is a {entry.fstype} mount in the sandbox, where the plan has {want.fstype}"
    return None


def identity_of(fd: int) -> Identity:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino

