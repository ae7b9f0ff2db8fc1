"""Opening what a runner binds: from the policy's pins, never through a name
that may have changed since the policy was resolved.

A source the policy service pinned is a ``dup`` of its pin; a source below a
pinned directory is opened from that pin one component at a time
(``open_beneath``); anything else is opened ``O_PATH|O_NOFOLLOW`` and checked
through ``/proc/self/fd`` to be exactly the path named.  A path that fails
any of these changed under the runner: it refuses, and nothing runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.pins import PinnedPaths, open_beneath


def changed(path: str, detail: str, runner: str) -> SandboxUnavailable:
    return SandboxUnavailable(f"{path} changed while the sandbox was being prepared ({detail}); "
                              "nothing ran, retry", runner=runner)


def open_checked(path: str, *, directory: bool, runner: str) -> int:
    """An ``O_PATH`` fd for exactly ``path`` (no symlink anywhere on the way)."""
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise changed(path, exc.strerror or str(exc), runner) from None
    actual = os.readlink(f"/proc/self/fd/{fd}")
    if actual != path:
        os.close(fd)
        raise changed(path, f"it now resolves to {actual}", runner)
    return fd


def is_inside(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def open_source(path: str, pins: PinnedPaths | None, *, directory: bool, runner: str) -> int:
    """An ``O_PATH`` fd of the bind source ``path``: its pin, or opened from the
    pin of the root it lies in, or opened by name and checked."""
    if pins is not None:
        pin = pins.get(path)
        if pin is not None:
            if directory and not pin.is_dir:
                raise changed(path, "it is no longer a directory", runner)
            fd = pins.dup(path)
            assert fd is not None
            return fd
        if any(p.is_dir and is_inside(path, str(p.path)) for p in pins):
            beneath = open_beneath(pins, Path(path), directory=directory)
            if beneath is None:
                raise changed(path, "it is missing, a symlink or moved below its writable root", runner)
            return beneath
    return open_checked(path, directory=directory, runner=runner)


def pinned_parent(path: str, pins: PinnedPaths | None, *, runner: str) -> int | None:
    """The pinned directory holding ``path`` (opened from its root's pin), or
    ``None`` when no pinned root holds it (then it is made by name)."""
    if pins is None or not any(p.is_dir and is_inside(path, str(p.path)) and str(p.path) != path for p in pins):
        return None
    return open_source(os.path.dirname(path), pins, directory=True, runner=runner)
