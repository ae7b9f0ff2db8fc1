"""Directories the host makes and writes for dsh-sandbox's own state.

The private ``/tmp`` of each session, the per-workspace sandbox HOMEs, the
spill files and the runner-order hint live under the caller's cache or
runtime directory (``$XDG_CACHE_HOME/dsh-sandbox``...).  The host creates,
writes, chmods and removes things there, as the caller (often root).  A
sandboxed command of an earlier run may have been able to write one of the
directories on the way (a writable root that held ``$XDG_CACHE_HOME`` under
another environment, a shared ``/var/tmp``), and a symlink it planted there
would choose where the host does all that: ``chmod 0700`` on ``/var/tmp``,
``rmtree`` of whatever the link names.  So every such directory is:

- reached by ``pins.walk``, which refuses a link a sandboxed command could
  have planted (a link only the host could make, such as ``/var/run``, is
  followed);
- created (missing parts) with ``mkdirat`` from the fd of the directory above,
  mode 0700, and then opened ``O_NOFOLLOW`` from that fd;
- judged on the opened fd: a directory of another user is refused; one of
  ours that others can enter is narrowed with ``fchmod`` (never by name);
- emptied and removed only through fds (``remove_tree``): a link met inside
  is unlinked, never followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from dsh.sandbox.errors import ConfigError, DshError
from dsh.sandbox.pins import PathRaced, walk

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_PATH = getattr(os, "O_PATH", os.O_RDONLY)
_DIR_PATH = _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class OwnDirUnavailable(ConfigError):
    """The directory cannot be made here (no writable home, e.g. ``nobody``'s
    ``/nonexistent``): the caller may fall back to another place."""


@dataclass(frozen=True)
class OwnDir:
    """A directory of dsh-sandbox's own state, held open (``O_RDONLY``):
    ``path`` is its canonical name, ``fd`` what was checked.  The caller closes ``fd``."""

    path: Path
    fd: int

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def open_own_dir(
    path: Path, label: str, fix: str, refuse: Callable[[Path], str | None] | None = None, *, narrow: bool = True
) -> OwnDir:
    """Open ``path`` (absolute), creating what is missing with mode 0700,
    without following a link a sandboxed command could have planted.

    ``fix`` ends every error (what the user can do instead).  ``refuse``:
    asked with the canonical path before anything is created; a reason it
    returns is a ``ConfigError``.  Raises ``OwnDirUnavailable`` when a missing
    part cannot be created, ``ConfigError`` for a planted link or a directory
    of another user, ``PathRaced`` when the path keeps changing; never an
    ``OSError``.  ``narrow``: an existing directory of ours that others can
    enter is made 0700 (not for a directory the user named, e.g. a log's).
    """
    resolved = walk(label, str(path), path)
    if resolved.pin is not None:
        os.close(resolved.pin.fd)
    target = resolved.path
    reason = refuse(target) if refuse is not None else None
    if reason is not None:
        raise ConfigError(f"{label}: {target} {reason}; {fix}")
    fd, made = _open_creating(path, target, label, fix)
    try:
        _check_private(fd, target, label, fix, made or not narrow)
    except BaseException:
        os.close(fd)
        raise
    return OwnDir(target, fd)


def write_new(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """Create ``name`` in the directory ``dir_fd`` (never an existing one, never
    through a link) with ``data`` and ``mode`` whatever the umask; ``OSError``
    if it cannot, with whatever was made left to the caller to remove."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def replace_file(own: OwnDir, name: str, data: bytes) -> bool:
    """Write ``data`` as ``name`` in ``own`` (mode 0600), whole or not at all:
    made under a fresh name from the directory's fd and renamed over the old
    one.  ``False`` when it could not be written (a full or read-only disk)."""
    tmp = f".{name}-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        write_new(own.fd, tmp, data, 0o600)
        os.replace(tmp, name, src_dir_fd=own.fd, dst_dir_fd=own.fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=own.fd)
        return False
    return True


def read_regular_file(path: str, limit: int | None = None) -> tuple[os.stat_result, bytes] | None:
    """A regular file's status and content, read without following a link in
    its last component and without blocking (a FIFO planted there must not
    hang the caller); ``None`` for anything else, for a file larger than
    ``limit`` bytes, or when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (limit is not None and info.st_size > limit):
            return None
        chunks = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if limit is not None and size > limit:
                return None  # grew while read
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return info, b"".join(chunks)


def first_own_dir(
    candidates: Iterable[tuple[Path, tuple[str, ...]]], label: str, fix: str,
    refuse: Callable[[Path], str | None] | None = None,
) -> tuple[OwnDir | None, list[str]]:
    """The first of ``candidates`` (``(anchor, parts)``, best first) that
    ``open_own_dir`` accepts, or ``None``; and why each one before it was
    refused (a planted link, another user's directory, a path that keeps
    moving), without the label and the fix, for the caller's own error."""
    tried: list[str] = []
    for anchor, parts in candidates:
        try:
            return open_own_dir(anchor.joinpath(*parts), label, fix, refuse), tried
        except DshError as exc:
            tried.append(str(exc).removeprefix(f"{label}: ").removesuffix(f"; {fix}"))
    return None, tried


def _open_creating(path: Path, target: Path, label: str, fix: str) -> tuple[int, bool]:
    """An fd of ``target`` (canonical), its missing parts made 0700 from the
    fd of the deepest existing one; whether the last part was made here."""
    for anchor in (target, *target.parents):
        found = walk(label, str(path), anchor)
        if found.pin is not None:
            break
    else:  # "/" always exists
        raise PathRaced(f"{label}: {path}: no directory on the way to it could be opened; retry")
    pin = found.pin
    try:
        if not pin.is_dir:
            raise OwnDirUnavailable(f"{label}: cannot create {target} ({found.path} is not a directory); {fix}")
        if found.path != anchor:
            # What existed a moment ago resolves elsewhere now: a rename or a
            # swap under the walk, judged like the walk's own races.
            raise PathRaced(f"{label}: {path}: a directory on the way to it changed while it was opened; "
                            "nothing ran, retry once nothing moves it")
        fd = os.open(".", _DIR, dir_fd=pin.fd)
    finally:
        os.close(pin.fd)
    made = False
    try:
        for part in target.relative_to(anchor).parts:
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
                made = True
            except FileExistsError:
                made = False  # made meanwhile by a concurrent session: opened and checked like any other
            except OSError as exc:
                raise OwnDirUnavailable(f"{label}: cannot create {target} ({exc.strerror}); {fix}") from None
            try:
                child = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                # ELOOP/ENOTDIR: a link or a file appeared at a name just made or found.
                raise ConfigError(f"{label}: {target}: cannot open it as a directory ({exc.strerror}); "
                                  f"remove what is there, or {fix}") from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd, made


def _check_private(fd: int, target: Path, label: str, fix: str, made: bool) -> None:
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        raise ConfigError(f"{label}: {target} belongs to uid {info.st_uid}, not to you; remove it, or {fix}")
    if not made and stat.S_IMODE(info.st_mode) & 0o077:
        # Ours, reached without a link, and held: other users have no business in it.
        os.fchmod(fd, 0o700)


def append_to(path: Path, label: str, fix: str, data: bytes) -> None:
    """Append ``data`` to the file ``path`` (made 0600), in a directory
    reached as ``open_own_dir`` does (made 0700 when missing, left as it is
    otherwise), opened from its fd without following a link; a FIFO or device
    there is refused.  ``OSError`` or ``DshError`` when it cannot be written."""
    own = open_own_dir(path.parent, label, fix, narrow=False)
    try:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(path.name, flags, 0o600, dir_fd=own.fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(path))
            _write_all(fd, data)
        finally:
            os.close(fd)
    finally:
        own.close()


def remove_tree(parent_fd: int, name: str) -> None:
    """Remove ``name`` (a directory under ``parent_fd``) and what it holds,
    by fd: a link met on the way is unlinked, never followed.  Directories a
    command left without rights for their owner (mode 0) get them back
    through their own fd first (root needs none).

    Depth-first with a stack, not recursion (a command can make a tree deeper
    than Python's recursion limit), holding one directory open at a time (a
    login session allows 1,024 descriptors, and such a tree can be deeper):
    going back up opens ``..`` and goes on only if it is the very directory
    that was left, so a tree moved meanwhile stops the removal with an
    ``OSError`` instead of emptying whatever now lies above it."""
    fd = _open_child(parent_fd, name)
    if fd is None:
        return
    # Each frame: a directory's name in the frame below, its identity, and the
    # subdirectories still to empty (its files are unlinked on entry).
    stack: list[tuple[str, tuple[int, int], list[str]]] = []
    try:
        stack.append((name, _identity(fd), _unlink_files(fd)))
        while True:
            current, _ident, pending = stack[-1]
            if pending:
                child = pending.pop()
                sub = _open_child(fd, child)
                if sub is not None:
                    os.close(fd)
                    fd = sub
                    stack.append((child, _identity(fd), []))
                    stack[-1] = (child, stack[-1][1], _unlink_files(fd))
                continue
            stack.pop()
            if not stack:
                os.close(fd)
                fd = -1
                os.rmdir(current, dir_fd=parent_fd)
                return
            up = os.open("..", _DIR, dir_fd=fd)
            os.close(fd)
            fd = up
            if _identity(fd) != stack[-1][1]:
                raise OSError(errno.ESTALE, "the tree moved while it was being removed", current)
            os.rmdir(current, dir_fd=fd)
    finally:
        if fd != -1:
            os.close(fd)


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _open_child(parent_fd: int, name: str) -> int | None:
    """The directory ``name`` opened for removal; ``None`` when it is gone or
    was no directory (a planted link: then the entry alone is unlinked)."""
    try:
        return _open_for_removal(parent_fd, name)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=parent_fd)
        return None


def _unlink_files(fd: int) -> list[str]:
    """Unlink every entry of the directory ``fd`` but its subdirectories; those are returned."""
    with os.scandir(fd) as entries:
        found = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for child, is_dir in found:
        if not is_dir:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(child, dir_fd=fd)
    return [child for child, is_dir in found if is_dir]


def _open_for_removal(parent_fd: int, name: str) -> int:
    if os.geteuid() != 0:
        handle = os.open(name, _DIR_PATH, dir_fd=parent_fd)
        try:
            if stat.S_IMODE(os.fstat(handle).st_mode) & 0o700 != 0o700:
                # chmod through the fd's own /proc entry: the directory just
                # opened without following a link, not whatever the name is now.
                os.chmod(f"/proc/self/fd/{handle}", 0o700)
            return os.open(".", _DIR, dir_fd=handle)
        finally:
            os.close(handle)
    return os.open(name, _DIR, dir_fd=parent_fd)
