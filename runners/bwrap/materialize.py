"""Turn a ``MountPlan`` into bwrap arguments backed by open file descriptors.

Every bind source is opened here (``O_PATH|O_NOFOLLOW``) and checked against the
planned path through ``/proc/self/fd``; bwrap then binds the fd, not the path,
so a directory swapped for a symlink after planning cannot redirect a mount.
Missing protected paths get a shared *placeholder* directory (see ``mounts``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from dataclasses import dataclass, field

from dsh.runners.bwrap.mounts import PLACEHOLDER_MODE, Mount, MountPlan, is_placeholder
from dsh.sandbox.errors import SandboxUnavailable

_RETRIES = 5


def _changed(path: str, detail: str) -> SandboxUnavailable:
    return SandboxUnavailable(
        f"{path} changed while the sandbox was being prepared ({detail}); nothing ran, retry",
        runner="bwrap",
    )


def open_checked(path: str, *, directory: bool) -> int:
    """An ``O_PATH`` fd for exactly ``path`` (no symlink anywhere on the way)."""
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _changed(path, exc.strerror or str(exc)) from None
    actual = os.readlink(f"/proc/self/fd/{fd}")
    if actual != path:
        os.close(fd)
        raise _changed(path, f"it now resolves to {actual}")
    return fd


@dataclass
class Placeholder:
    """A read-only empty directory standing in for a missing protected path.

    Every sandbox using it holds a shared ``flock`` on it; the last one to finish
    (the one that gets the exclusive lock) removes it, so the workspace is left
    as it was.  A crash leaves an empty 0555 directory that the next run adopts.
    """

    path: str
    fd: int

    @classmethod
    def acquire(cls, path: str) -> Placeholder | None:
        """The placeholder at ``path``; ``None`` if a real entry appeared there."""
        for _ in range(_RETRIES):
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, PLACEHOLDER_MODE)
                os.chmod(path, PLACEHOLDER_MODE)  # the umask may have cleared bits
            if not is_placeholder(path):
                return None
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                here = os.lstat(path)
            except OSError:
                here = None
            mine = os.fstat(fd)
            if here is not None and (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino):
                return cls(path, fd)
            os.close(fd)  # a finishing sandbox removed it meanwhile: make a new one
        raise _changed(path, "a placeholder kept disappearing")

    def release(self) -> None:
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


@dataclass
class OpenedMounts:
    """bwrap mount arguments plus the fds and placeholders they rely on."""

    args: list[str] = field(default_factory=list)
    late_args: list[str] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    placeholders: list[Placeholder] = field(default_factory=list)

    def close(self) -> None:
        for ph in self.placeholders:
            ph.release()
        owned = {ph.fd for ph in self.placeholders}
        for fd in self.fds:
            if fd not in owned:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.placeholders.clear()
        self.fds.clear()


def _open_one(opened: OpenedMounts, m: Mount) -> None:
    if m.kind in ("bind", "pin"):
        fd = open_checked(m.path, directory=True)
        opened.fds.append(fd)
        opened.args += ["--bind-fd", str(fd), m.path]
    elif m.kind == "private-tmp" and m.source is not None:
        fd = open_checked(m.source, directory=True)
        opened.fds.append(fd)
        opened.args += ["--bind-fd", str(fd), m.path]
    elif m.kind == "ro-bind":
        fd = open_checked(m.path, directory=False)
        opened.fds.append(fd)
        opened.args += ["--ro-bind-fd", str(fd), m.path]
    elif m.kind == "placeholder":
        try:
            ph = Placeholder.acquire(m.path)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                # We cannot create it here, and the sandbox runs with our uid and
                # groups (and, as root, without capabilities): nor can it.
                return
            raise _changed(m.path, exc.strerror or str(exc)) from None
        if ph is None:
            if os.path.islink(m.path):
                raise _changed(m.path, "a symlink appeared at a protected path")
            _open_one(opened, Mount("ro-bind", m.path, m.why))  # it appeared: protect it
            return
        opened.placeholders.append(ph)
        opened.fds.append(ph.fd)
        opened.args += ["--ro-bind-fd", str(ph.fd), m.path]
    elif m.kind == "mask-dir":
        # Read-only only at the end (``open_mounts``): deeper mounts may still
        # need their mount points created in this tmpfs.
        opened.args += ["--tmpfs", m.path]
        opened.late_args += ["--remount-ro", m.path]
    else:  # mask-file
        opened.args += ["--ro-bind", "/dev/null", m.path]


def open_mounts(plan: MountPlan) -> OpenedMounts:
    """Open every source of ``plan``; on failure release what was opened and raise."""
    opened = OpenedMounts()
    try:
        for m in plan.mounts:
            _open_one(opened, m)
    except BaseException:
        opened.close()
        raise
    opened.args += opened.late_args
    opened.late_args = []
    return opened
