"""Take back the mount points the daemon made in a directory it bound by mistake.

runc makes the mount point of every nested mount (a protected ``.git``, the
placeholder of a missing ``.dsh``, a hidden path's mask) inside the directory
it bound above it, resolving that directory by name.  A concurrent run that
exchanges the workspace's name with a symlink while the container starts gets
the link's target bound there, outside every root, and those mount points made
in it.  ``verify.check_container`` refuses such a container; this module then
finds the directory the container bound, by the device and path its mount
table names and the inode the container saw, and removes from it what was born
after the container started and is still empty.  What it cannot take back it
names, so the refusal can say where to look.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from dsh.runners.docker.spec import ContainerSpec, MountSpec
from dsh.runners.docker.verify import mountinfo_in, stat_in
from dsh.runners.linux.mount_check import MountEntry, identity_of, mount_table
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.policy_paths import is_within

Identity = tuple[int, int]

_STATX_BTIME = 0x800
_AT_SYMLINK_NOFOLLOW = 0x100
#: File times come from the kernel's coarse clock, a tick behind ``time.time()``.
_CLOCK_SLACK = 0.02


def take_back_from(refusal: SandboxUnavailable, container: Any, pid: int, spec: ContainerSpec,
                   expected: Mapping[str, Identity], since: float) -> SandboxUnavailable:
    """``take_back`` for a running container (its init is ``pid`` here) that
    was refused: its mount table and inodes read through ``/proc/<pid>``, or by
    an exec inside where that is out of reach (another user's container).
    Returns the refusal to raise, naming what stays."""
    left = _take_back_from(container, pid, spec, expected, since)
    if not left:
        return refusal
    return SandboxUnavailable(f"{refusal.reason}; the daemon made mount points in the directory it bound "
                              f"instead that could not be removed: {', '.join(left)}", runner=refusal.runner)


def _take_back_from(container: Any, pid: int, spec: ContainerSpec, expected: Mapping[str, Identity],
                    since: float) -> list[str]:

    def identity(target: str) -> Identity | None:
        try:
            info = os.stat(f"/proc/{pid}/root{target}", follow_symlinks=False)
        except PermissionError:
            return stat_in(container, [target]).get(target)
        except OSError:
            return None
        return (info.st_dev, info.st_ino)

    try:
        try:
            with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
                table = fh.read()
        except PermissionError:
            table = mountinfo_in(container)
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
            host = fh.read()
        return take_back(spec, expected, since, container_mounts=table, container_identity=identity,
                         host_mounts=host)
    except (OSError, SandboxUnavailable) as exc:
        return [f"(what the daemon made could not be looked for: {exc})"]


def take_back(spec: ContainerSpec, expected: Mapping[str, Identity], since: float, *,
              container_mounts: str, container_identity: Callable[[str], Identity | None],
              host_mounts: str) -> list[str]:
    """Remove the mount points runc made under each pinned bind the container
    got wrong; return the paths it made that are still there.

    ``container_mounts`` is the container's mount table, ``container_identity``
    the ``(st_dev, st_ino)`` a target has in the container, ``host_mounts``
    this host's mount table, ``since`` the time the container was started.
    """
    inside = mount_table(container_mounts)
    host = mount_table(host_mounts)
    left: list[str] = []
    for target, want in sorted(expected.items()):
        nested = _nested(spec.mounts, target)
        if not nested:
            continue
        seen = container_identity(target)
        if seen is None or seen == want:
            continue
        bound = [e for e in inside if e.point == target]
        if not bound:
            continue
        fd = _open_bound(bound[-1], host, seen)
        if fd is None:
            left.append(f"{target} (swapped: the directory bound instead could not be found)")
            continue
        try:
            left += _take_back_nested(fd, target, nested, since)
        finally:
            os.close(fd)
    return left


def after_failed_start(spec: ContainerSpec, expected: Mapping[str, Identity], since: float) -> list[str]:
    """After a start that failed: what runc may have made outside every root.

    A failing start leaves no container whose mount table names the directory
    runc bound.  For each pinned bind with nested mounts whose source name
    leads elsewhere now, what runc made there (born since ``since``, empty) is
    removed; for a pinned directory renamed since ``since`` (a swap and a swap
    back), so is what runc made where a symlink beside it leads, and the
    refusal says what the daemon may have made, since where its name led
    meanwhile cannot be known for sure.
    Returns notes for the refusal, empty when nothing points outside."""
    notes: list[str] = []
    for mount in spec.mounts:
        want = expected.get(mount.target)
        nested = _nested(spec.mounts, mount.target)
        if want is None or mount.source is None or not nested:
            continue
        try:
            fd = os.open(mount.source, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            fd = None
        try:
            if fd is not None and identity_of(fd) != want:
                notes += _take_back_nested(fd, mount.target, nested, since)
            elif fd is None or os.fstat(fd).st_ctime >= since - _CLOCK_SLACK:
                # Renamed (a rename sets its ctime; so do an entry made in it and a
                # change of its mode, taken alike: the note says "may").  An exchange
                # leaves the link beside it: what runc made where one leads goes.
                for beside in _linked_beside(mount.source, want):
                    try:
                        notes += _take_back_nested(beside, mount.target, nested, since)
                    finally:
                        os.close(beside)
                names = ", ".join(sorted({Path(m.target).relative_to(mount.target).parts[0] for m in nested}))
                notes.append(f"{mount.source} was renamed or changed while the container started: if a command "
                             f"swapped it for a symlink, the daemon may have made empty mount points ({names}) "
                             "where that link led")
        finally:
            if fd is not None:
                os.close(fd)
    return notes


def _take_back_nested(top: int, target: str, nested: list[MountSpec], since: float) -> list[str]:
    """``_take_back_one`` of each of ``nested`` (mounts below ``target``) in
    the directory ``top``; returns what stays."""
    made = [left for mount in nested
            for left in _take_back_one(top, mount, Path(mount.target).relative_to(target).parts, since)]
    # A directory kept for a sibling's mount point may have gone with that sibling's turn.
    return [path for path in dict.fromkeys(made) if os.path.lexists(path)]


#: How many symlinks beside a renamed bind source are followed after a failed start.
_LINKS_BESIDE = 64


def _linked_beside(source: str, want: Identity) -> list[int]:
    """fds of the directories the symlinks in ``source``'s parent lead to,
    other than the pinned one: where an exchange of ``source`` with one of
    them (``renameat2(RENAME_EXCHANGE)``) would have sent runc."""
    try:
        with os.scandir(os.path.dirname(source)) as entries:
            links = [entry.path for entry in entries if entry.is_symlink()][:_LINKS_BESIDE]
    except OSError:
        return []
    fds = []
    for link in links:
        try:
            fd = os.open(link, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        if identity_of(fd) == want:
            os.close(fd)
        else:
            fds.append(fd)
    return fds


def _nested(mounts: Iterable[MountSpec], target: str) -> list[MountSpec]:
    """The mounts whose nearest enclosing bind is ``target``: their mount
    points were made in whatever directory was bound there."""
    binds = [Path(m.target) for m in mounts if m.kind == "bind"]
    out = []
    for mount in mounts:
        path = Path(mount.target)
        if path == Path(target) or not is_within(path, Path(target)):
            continue
        enclosing = str(max((b for b in binds if b != path and is_within(path, b)), key=lambda b: len(b.parts)))
        if enclosing == target:
            out.append(mount)
    return out


def _open_bound(entry: MountEntry, host: list[MountEntry], seen: Identity) -> int | None:
    """An fd on the host directory the container bound at ``entry``: a host
    mount of the same filesystem whose root holds it, walked without following
    a link, and only if it is the inode the container saw."""
    for mount in host:
        if mount.device != entry.device:
            continue
        base = mount.root.rstrip("/")
        if entry.root != mount.root and not entry.root.startswith(base + "/"):
            continue
        path = Path(mount.point) / entry.root[len(base):].lstrip("/")
        fd = _walk(path)
        if fd is None:
            continue
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) == seen:
            return fd
        os.close(fd)
    return None


def _walk(path: Path) -> int | None:
    try:
        fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    for part in path.parts[1:]:
        try:
            child = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = child
    return fd


def _take_back_one(top: int, mount: MountSpec, parts: tuple[str, ...], since: float) -> list[str]:
    """Remove ``parts`` (the mount point, then each directory runc made to
    reach it) below ``top``, deepest first, where born since ``since`` and
    empty.  Returns what runc made that stays."""
    chain: list[tuple[int, str]] = []  # (directory fd, name) for each part that exists
    fd = os.dup(top)
    try:
        for index, part in enumerate(parts):
            try:
                info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except OSError:
                break
            chain.append((os.dup(fd), part))
            if index == len(parts) - 1 or not stat.S_ISDIR(info.st_mode):
                break
            child = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    left: list[str] = []
    try:
        for depth, (parent, name) in reversed(list(enumerate(chain))):
            leaf = depth == len(parts) - 1
            born = _birth(parent, name)
            if born is None:
                # No birth time on this filesystem: a changed leaf is named, not removed.
                if leaf and os.stat(name, dir_fd=parent, follow_symlinks=False).st_ctime >= since - _CLOCK_SLACK:
                    left.append(os.path.join(_fd_path(parent), name))
                continue
            if born < since - _CLOCK_SLACK:
                continue  # there before the container started: not runc's
            if not _remove_empty(parent, name, leaf and mount.kind == "bind" and _is_file_bind(mount)):
                left.append(os.path.join(_fd_path(parent), name))
    finally:
        for parent, _name in chain:
            os.close(parent)
    return left


def _is_file_bind(mount: MountSpec) -> bool:
    try:
        return not stat.S_ISDIR(os.stat(mount.source or "").st_mode)
    except OSError:
        return False


def _remove_empty(parent: int, name: str, is_file: bool) -> bool:
    """Remove an empty directory (``rmdir`` refuses one that is not), or an
    empty, unlinked-elsewhere regular file for a file bind's mount point."""
    try:
        if not is_file:
            os.rmdir(name, dir_fd=parent)
            return True
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISREG(info.st_mode) and info.st_size == 0 and info.st_nlink == 1:
            os.unlink(name, dir_fd=parent)
            return True
    except OSError as exc:
        return exc.errno == errno.ENOENT
    return False


def _birth(parent: int, name: str) -> float | None:
    """When ``name`` was made (statx's birth time), or None where the
    filesystem does not record it."""
    buffer = ctypes.create_string_buffer(256)
    if _libc.statx(parent, name.encode(), _AT_SYMLINK_NOFOLLOW, _STATX_BTIME, buffer) != 0:
        return None
    if not struct.unpack_from("I", buffer, 0)[0] & _STATX_BTIME:
        return None
    seconds, nanoseconds = struct.unpack_from("qI", buffer, 80)
    return float(seconds + nanoseconds / 1e9)


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


_libc = ctypes.CDLL(None, use_errno=True)
_libc.statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
