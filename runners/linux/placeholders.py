"""Placeholders: read-only empty directories standing in for missing protected paths.

A bind mount needs something to mount on, so a protected path that does not
exist yet (``.dsh``, ``.vscode``) is created as an empty directory with mode
``PLACEHOLDER_MODE`` and bound read-only onto itself: nothing can be created
at that name while the sandbox lives.  Every sandbox using one holds a shared
``flock`` on it; the last to finish (the one that gets the exclusive lock)
removes it, so the workspace is left as it was.  A crash leaves an empty 0555
directory, which the mount plan takes for missing and the next run adopts.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from dataclasses import dataclass

from dsh.sandbox.mount_plan import PLACEHOLDER_MODE, is_placeholder

_RETRIES = 5


class PlaceholderError(OSError):
    """A placeholder kept disappearing (another sandbox removing it as we made it)."""


@dataclass
class Placeholder:
    path: str
    fd: int

    @classmethod
    def acquire(cls, path: str, parent_fd: int | None = None) -> Placeholder | None:
        """The placeholder at ``path``; ``None`` if a real entry appeared there.

        ``parent_fd``: the directory that holds it, pinned (its name is not
        followed again: it may be a symlink by now, and the placeholder must
        not be made wherever that link points).  Raises ``OSError`` when it
        cannot be made (no permission: nor can the command, which runs with
        the caller's ids and no capability).
        """
        name = os.path.basename(path) if parent_fd is not None else path
        for _ in range(_RETRIES):
            made = False
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, PLACEHOLDER_MODE, dir_fd=parent_fd)
                made = True
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
            except FileNotFoundError:
                continue  # a finishing sandbox removed it meanwhile: make a new one
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP, errno.EACCES):
                    return None  # a real entry: a file, a link, someone else's directory
                raise
            if made:
                # The umask may have cleared bits.  Through the fd: a chmod by name
                # would follow a link a command swapped in since the mkdir.
                os.fchmod(fd, PLACEHOLDER_MODE)
            if not _empty_placeholder(fd):
                os.close(fd)
                return None
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                here = os.lstat(name, dir_fd=parent_fd)
            except OSError:
                here = None
            mine = os.fstat(fd)
            if here is not None and (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino):
                return cls(path, fd)
            os.close(fd)  # a finishing sandbox removed it meanwhile: make a new one
        raise PlaceholderError(f"{path}: a placeholder kept disappearing")

    def release(self) -> None:
        """Remove it if no other sandbox holds it; always closes the fd."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)  # another sandbox still relies on it
            return
        try:
            here = os.lstat(self.path)
            mine = os.fstat(self.fd)
            if (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino) and is_placeholder(self.path):
                os.rmdir(self.path)
        except OSError:
            pass  # already gone or no longer empty: leave it
        finally:
            os.close(self.fd)


def _empty_placeholder(fd: int) -> bool:
    """Is the directory open as ``fd`` an empty one with the placeholder mode?"""
    info = os.fstat(fd)
    return stat.S_IMODE(info.st_mode) == PLACEHOLDER_MODE and not os.listdir(fd)
