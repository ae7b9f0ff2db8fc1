"""The daemon binds by path: check that each bind is what the policy pinned.

The policy service resolved the workspace, the writable roots and the
read-only paths once and holds each by fd (``dsh.sandbox.pins``); the daemon
is only given their names, and resolves them again when it creates the
container.  A concurrent run that swaps one of those directories for a
symlink at that moment would get the link's target bound writable.  So:

- before the container is made, each pinned source must still resolve (as
  the daemon will resolve it, following links) to the pinned inode;
- once it runs, each bind's mount point, seen through the container's own
  root (``/proc/<pid>/root``), must be the pinned inode (``st_dev``,
  ``st_ino``).

Anything else removes the container and fails closed, naming the path.  With
a daemon on another machine the pins mean nothing there (another kernel,
another filesystem view): nothing is checked and the docs say so.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from dsh.runners.docker import client as dc
from dsh.runners.docker.placeholder_source import set_mode
from dsh.runners.docker.spec import ContainerSpec, MountSpec
from dsh.runners.linux.mount_check import identity_of, mount_table
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.mount_facts import PLACEHOLDER_MODE
from dsh.sandbox.pins import PinnedPaths, open_beneath

Identity = tuple[int, int]


def pinned_binds(spec: ContainerSpec, pins: PinnedPaths) -> dict[str, Identity]:
    """Bind target -> the identity its source has: the pin's, or, for a source
    inside a pinned directory (a protected ``.git``, its config, a read-only
    path in the workspace), the one reached from that pin without following a
    link.  The daemon resolves each source by name, at its own moment: a
    nested one as much as the root above it, so a directory on the way
    exchanged with a link would bind another repository's ``.git`` writable.
    Raises ``SandboxUnavailable`` when such a source is missing or a link by now."""
    out: dict[str, Identity] = {}
    for mount in _binds(spec.mounts):
        source = mount.source or ""
        pin = pins.get(source)
        if pin is not None:
            out[mount.target] = pin.identity
            continue
        if not _beneath_a_pin(pins, Path(source)):
            continue  # not the policy's (the runner's own empty directory, /dev/null, the user's git config)
        fd = open_beneath(pins, Path(source))
        if fd is None:
            raise _changed(source, "it is missing or a symlink by now")
        try:
            out[mount.target] = identity_of(fd)
        finally:
            os.close(fd)
    return out


def _beneath_a_pin(pins: PinnedPaths, path: Path) -> bool:
    """Does ``path`` lie inside a pinned directory (``open_beneath`` then reaches it)?"""
    return any(p.is_dir and p.path in path.parents for p in pins)


def check_sources(spec: ContainerSpec, expected: Mapping[str, Identity]) -> None:
    """Before creating: each pinned source, resolved by name as the daemon
    will, is still the pinned inode."""
    for mount in _binds(spec.mounts):
        want = expected.get(mount.target)
        if want is None or mount.source is None:
            continue
        try:
            info = os.stat(mount.source)
        except OSError as exc:
            raise _changed(mount.source, exc.strerror or str(exc)) from None
        if (info.st_dev, info.st_ino) != want:
            raise _changed(mount.source, "it now names another directory (swapped since it was resolved)")


def check_container(pid: int, expected: Mapping[str, Identity],
                    stat_inside: Callable[[list[str]], Mapping[str, Identity]],
                    mounts_inside: Callable[[], set[str]] | None = None) -> None:
    """In the running container (its init is ``pid`` on this host): each
    pinned bind's mount point is the pinned inode.

    Seen through ``/proc/<pid>/root``; where that is out of reach (the
    container's user is not the caller's), ``stat_inside`` asks inside."""
    if pid <= 0:
        # Not running (it died under its limits): nothing can run in it, and
        # the exec that tries says why, naming the limit.
        return
    _check_mount_points(pid, expected, mounts_inside)
    root = f"/proc/{pid}/root"
    seen: dict[str, Identity] = {}
    for target in sorted(expected):
        try:
            info = os.stat(root + target, follow_symlinks=False)
        except PermissionError:
            seen = dict(stat_inside(sorted(expected)))
            break
        except OSError as exc:
            raise _changed(target, f"its bind cannot be checked in the container: {exc.strerror or exc}") from None
        seen[target] = (info.st_dev, info.st_ino)
    for target, want in sorted(expected.items()):
        if seen.get(target) != want:
            raise _changed(target, "the container bound another directory than the one resolved")


def _check_mount_points(pid: int, expected: Mapping[str, Identity],
                        mounts_inside: Callable[[], set[str]] | None) -> None:
    """Each pinned bind is mounted at its own path in the container: a target
    swapped for a symlink while runc mounted would have put it elsewhere, and
    the name then shows whatever lies there now, not the mount."""
    try:
        with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
            points = mount_points(fh.read())
    except PermissionError:
        if mounts_inside is None:
            return
        points = mounts_inside()  # another user's container: read from inside
    except OSError as exc:
        raise _changed(next(iter(expected)), f"the container's mounts cannot be read: {exc.strerror}") from None
    for target in sorted(expected):
        if target not in points:
            raise _changed(target, "its bind is not mounted at its own path in the container")


def mount_points(mountinfo: str) -> set[str]:
    return {entry.point for entry in mount_table(mountinfo)}


def mounts_in(container: Any) -> set[str]:
    """The mount points the container's processes see."""
    return mount_points(mountinfo_in(container))


def mountinfo_in(container: Any) -> str:
    """The container's mount table, as its processes see it (an exec of ``cat``)."""
    from docker.errors import DockerException  # type: ignore[import-untyped]

    try:
        code, out = container.exec_run(["cat", "/proc/self/mountinfo"], user="0")
    except DockerException as exc:
        raise SandboxUnavailable(f"cannot read the container's mounts: {exc}", runner="docker") from None
    if code != 0:
        raise SandboxUnavailable("cannot read the container's mounts (cat failed)", runner="docker")
    return (out or b"").decode("utf-8", "surrogateescape")


def stat_in(container: Any, targets: list[str]) -> dict[str, Identity]:
    """``(st_dev, st_ino)`` of ``targets`` as the container sees them (an exec of ``stat``)."""
    from docker.errors import DockerException

    try:
        code, out = container.exec_run(["stat", "-c", "%d %i", "--", *targets], user="0")
    except DockerException as exc:
        raise _changed(targets[0], f"its bind cannot be checked in the container: {exc}") from None
    lines = (out or b"").decode("utf-8", "replace").split()
    if code != 0 or len(lines) != 2 * len(targets):
        raise _changed(targets[0], "its bind cannot be checked in the container (stat failed)")
    numbers = [int(x) for x in lines]
    return {t: (numbers[2 * i], numbers[2 * i + 1]) for i, t in enumerate(targets)}


def hold_placeholders(spec: ContainerSpec, pins: PinnedPaths | None, made: Callable[[str], None]) -> list[int]:
    """Make each missing protected path's placeholder and take a shared lock
    on it (fds to close once the container exists): another session's cleanup
    leaves a placeholder alone while a session is about to bind it.  ``made``
    is told of each placeholder this call made or found."""
    held: list[int] = []
    try:
        for path in spec.placeholders:
            for _attempt in range(5):
                try:
                    make_placeholder(path, pins)
                    made(path)
                except FileExistsError:
                    pass  # made meanwhile (another session): it is bound read-only all the same
                except OSError as exc:
                    raise SandboxUnavailable(f"cannot create the read-only placeholder {path} "
                                             f"for a missing protected path: {exc}", runner="docker") from None
                fd = dc.hold_placeholder(path)
                if fd is not None:
                    held.append(fd)
                    break
            else:
                raise SandboxUnavailable(f"the read-only placeholder {path} kept disappearing (another "
                                         "session's cleanup?); nothing ran, retry", runner="docker")
    except BaseException:
        for fd in held:
            os.close(fd)
        raise
    return held


def make_placeholder(path: str, pins: PinnedPaths | None) -> None:
    """``mkdir`` of an empty placeholder directory, from the fd of the pinned
    directory holding it (its writable root's name may be a symlink by now);
    by name only when no pin covers it (a daemon on another machine)."""
    parent = Path(path).parent
    holder = None
    if pins is not None:
        if pins.get(parent) is not None:
            holder = pins.dup(parent)
        elif _beneath_a_pin(pins, parent):
            holder = open_beneath(pins, parent, directory=True)
            if holder is None:
                raise _changed(str(parent), "it is missing, a symlink or moved below its writable root")
    # The placeholder mode, as the other runners make it: a placeholder left
    # behind (a crash) is then known for one by the next plan, which adopts it,
    # instead of taken for a protected directory of the user's.
    name, where = (path, None) if holder is None else (Path(path).name, holder)
    try:
        os.mkdir(name, PLACEHOLDER_MODE, dir_fd=where)
        set_mode(name, PLACEHOLDER_MODE, where)
    finally:
        if holder is not None:
            os.close(holder)


def _binds(mounts: Iterable[MountSpec]) -> Iterable[MountSpec]:
    return (m for m in mounts if m.kind == "bind" and m.source is not None and Path(m.source).is_absolute())


def _changed(path: str, detail: str) -> SandboxUnavailable:
    return SandboxUnavailable(
        f"{path} changed while the container was being made ({detail}); the container was removed "
        "and nothing ran, retry",
        runner="docker",
    )
