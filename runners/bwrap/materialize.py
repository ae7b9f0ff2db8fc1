"""Turn a ``MountPlan`` into bwrap arguments backed by open file descriptors.

A writable root or read-only path the policy service pinned is bound from its
pin (a ``dup`` of the fd the service checked); a source below a pinned root
(a protected path, a pinned ancestor) is opened from the root's fd one
component at a time, never through a symlink; any other source is opened
(``O_PATH|O_NOFOLLOW``) and checked against the planned path through
``/proc/self/fd``.  bwrap then binds the fd, not the path, so a directory
swapped for a symlink after the policy was resolved cannot redirect a mount.
Missing protected paths get a shared *placeholder* directory (see ``mounts``),
made from the fd of the directory that holds it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass, field

from dsh.runners.bwrap.mounts import Mount, MountPlan
from dsh.runners.linux.mount_check import ExpectedMount, identity_of
from dsh.runners.linux.pinned_open import changed, open_checked, open_source, pinned_parent
from dsh.runners.linux.placeholders import Placeholder
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.pins import PinnedPaths


def _changed(path: str, detail: str) -> SandboxUnavailable:
    return changed(path, detail, "bwrap")


@dataclass
class OpenedMounts:
    """bwrap mount arguments plus the fds and placeholders they rely on, and
    what each mount must look like in the sandbox (checked before the command starts)."""

    args: list[str] = field(default_factory=list)
    expected: list[ExpectedMount] = field(default_factory=list)
    late_args: list[str] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    placeholders: list[Placeholder] = field(default_factory=list)
    # What the masks cover: bwrap cannot mount over one removed meanwhile.
    masks: list[str] = field(default_factory=list)

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


def _open_one(opened: OpenedMounts, m: Mount, pins: PinnedPaths | None) -> None:
    if m.kind in ("bind", "pin"):
        fd = open_source(m.path, pins, directory=True, runner="bwrap")
        opened.fds.append(fd)
        opened.args += ["--bind-fd", str(fd), m.path]
        opened.expected.append(ExpectedMount(m.path, identity_of(fd), onto_itself=True))
    elif m.kind == "private-tmp" and m.source is not None:
        fd = open_checked(m.source, directory=True, runner="bwrap")
        opened.fds.append(fd)
        opened.args += ["--bind-fd", str(fd), m.path]
        opened.expected.append(ExpectedMount(m.path, identity_of(fd)))
    elif m.kind == "ro-bind":
        fd = open_source(m.path, pins, directory=False, runner="bwrap")
        opened.fds.append(fd)
        opened.args += ["--ro-bind-fd", str(fd), m.path]
        opened.expected.append(ExpectedMount(m.path, identity_of(fd), read_only=True, onto_itself=True))
    elif m.kind == "placeholder":
        parent = pinned_parent(m.path, pins, runner="bwrap")
        try:
            ph = Placeholder.acquire(m.path, parent)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                # We cannot create it here, and the sandbox runs with our uid and
                # groups (and, as root, without capabilities): nor can it.
                return
            raise _changed(m.path, exc.strerror or str(exc)) from None
        finally:
            if parent is not None:
                os.close(parent)
        if ph is None:
            if os.path.islink(m.path):
                raise _changed(m.path, "a symlink appeared at a protected path")
            _open_one(opened, Mount("ro-bind", m.path, m.why), pins)  # it appeared: protect it
            return
        opened.placeholders.append(ph)
        opened.fds.append(ph.fd)
        opened.args += ["--ro-bind-fd", str(ph.fd), m.path]
        opened.expected.append(ExpectedMount(m.path, identity_of(ph.fd), read_only=True, onto_itself=True))
    elif m.kind == "mask-dir":
        # Read-only only at the end (``open_mounts``): deeper mounts may still
        # need their mount points created in this tmpfs.
        opened.args += ["--tmpfs", m.path]
        opened.masks.append(m.path)
        opened.late_args += ["--remount-ro", m.path]
        opened.expected.append(ExpectedMount(m.path, read_only=True, fstype="tmpfs"))
    else:  # mask-file
        opened.args += ["--ro-bind", "/dev/null", m.path]
        opened.masks.append(m.path)
        null = os.stat("/dev/null")
        opened.expected.append(ExpectedMount(m.path, (null.st_dev, null.st_ino), read_only=True))


def open_mounts(plan: MountPlan, pins: PinnedPaths | None = None) -> OpenedMounts:
    """Open every source of ``plan`` (from ``pins``, the policy's held paths,
    where they cover it); on failure release what was opened and raise."""
    opened = OpenedMounts()
    try:
        for m in plan.mounts:
            _open_one(opened, m, pins)
    except OSError as exc:
        opened.close()
        raise _changed(exc.filename or "a mount source", exc.strerror or str(exc)) from None
    except BaseException:
        opened.close()
        raise
    opened.args += opened.late_args
    opened.late_args = []
    return opened
