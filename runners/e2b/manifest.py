"""The host side of sync-in: what the workspace holds, and the archive of it.

A ``Manifest`` (path -> kind, size, mtime, mode, link target) is taken of the
host workspace at each sync.  Before every command the session compares a new
one with the last: unchanged means the sandbox's copy is current; otherwise
only the changed entries are archived and sent, and entries gone from the host
are removed in the sandbox.  Sync-back uses the manifest too: a regular file
that was there at the last sync, is unchanged on the host, and is gone from the
sandbox was deleted by the command, so it is deleted on the host.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class Entry:
    kind: str  # "file", "dir" or "link"
    size: int
    mtime_ns: int
    mode: int
    target: str = ""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Manifest = Mapping[str, Entry]  # workspace-relative POSIX path -> entry


def entry_of(st: os.stat_result, path: Path, link_target: str | None = None) -> Entry | None:
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISLNK(st.st_mode):
        return Entry("link", 0, 0, 0, link_target if link_target is not None else os.readlink(path))
    else:
        return None  # sockets, fifos, devices are not synced
    return Entry(kind, st.st_size if kind == "file" else 0, st.st_mtime_ns,
                 stat.S_IMODE(st.st_mode))


def content_digest(source: IO[bytes], executable: bool) -> str:
    """What "the same file" means for sync: its bytes and its executable bit."""
    digest = hashlib.sha256()
    while chunk := source.read(1 << 20):
        digest.update(chunk)
    return digest.hexdigest() + (":x" if executable else "")


def open_workspace(workspace: Path, root_fd: int | None) -> int:
    """A readable fd of the workspace: from ``root_fd`` (the policy's pin,
    whatever the name points at now), else by name."""
    if root_fd is not None:
        return os.open(".", _DIR_FLAGS, dir_fd=root_fd)
    return os.open(workspace, _DIR_FLAGS)


def open_dirs(top: int, parts: Iterable[str]) -> int:
    """A new fd of the directory ``parts`` below ``top``, one component at a
    time, never through a symlink (``OSError`` otherwise)."""
    fd = os.dup(top)
    try:
        for part in parts:
            step = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def take_manifest(workspace: Path, *, exclude: Iterable[Path] = (), root_fd: int | None = None) -> dict[str, Entry]:
    """Every syncable entry under ``workspace`` except ``exclude`` (hidden paths).

    Read through directory fds from the workspace's pin (``root_fd``): a
    directory swapped for a symlink meanwhile is never followed out."""
    excluded = {Path(p) for p in exclude}
    found: dict[str, Entry] = {}
    top = open_workspace(workspace, root_fd)
    try:
        for dirpath, dirnames, filenames, dirfd in os.fwalk(".", dir_fd=top):
            rel = os.path.normpath(dirpath)
            base = workspace if rel == "." else workspace / rel
            dirnames[:] = [d for d in dirnames if (base / d) not in excluded]
            for name in dirnames + filenames:
                path = base / name
                if path in excluded:
                    continue
                try:
                    info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                    target = os.readlink(name, dir_fd=dirfd) if stat.S_ISLNK(info.st_mode) else None
                    entry = entry_of(info, path, target)
                except OSError:
                    continue  # vanished while walking
                if entry is not None:
                    found[path.relative_to(workspace).as_posix()] = entry
    finally:
        os.close(top)
    return found


def changes(old: Manifest, new: Manifest) -> tuple[list[str], list[str]]:
    """(entries to send, entries to remove first): new or changed, and gone or
    changed kind (a file that became a directory must be removed before)."""
    send = sorted(rel for rel, entry in new.items() if old.get(rel) != entry)
    remove = sorted(rel for rel, entry in old.items()
                    if rel not in new or new[rel].kind != entry.kind)
    return send, remove


def pack(workspace: Path, names: Collection[str], out: IO[bytes], *, root_fd: int | None = None) -> dict[str, str]:
    """Archive the workspace entries ``names`` (parents first) into ``out``;
    return the content digest of each regular file sent.

    Every entry is opened from the workspace's pin (``root_fd``) one
    component at a time, never through a symlink: what is uploaded is what
    lies in the workspace, not what a swapped link points at.  Owners are
    dropped so the sandbox user owns what it extracts.
    """
    digests: dict[str, str] = {}
    top = open_workspace(workspace, root_fd)
    try:
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel in sorted(names):
                digest = _add_entry(tar, top, rel)
                if digest is not None:
                    digests[rel] = digest
    finally:
        os.close(top)
    return digests


def _add_entry(tar: tarfile.TarFile, top: int, rel: str) -> str | None:
    """Add one entry; its digest if it is a regular file.  A vanished or
    swapped entry is left out: the next manifest will notice."""
    parts = rel.split("/")
    try:
        parent = open_dirs(top, parts[:-1])
    except OSError:
        return None
    try:
        st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        info = tarfile.TarInfo(rel)
        info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)  # int: no pax header per member
        if stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
            return None
        if stat.S_ISLNK(st.st_mode):
            info.type, info.linkname = tarfile.SYMTYPE, os.readlink(parts[-1], dir_fd=parent)
            tar.addfile(info)
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        # A hardlink goes as a copy, not a link.
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
        with os.fdopen(fd, "rb") as fh:
            opened = os.fstat(fh.fileno())
            if not stat.S_ISREG(opened.st_mode):
                return None
            info.size = opened.st_size
            digest = content_digest(fh, bool(info.mode & 0o100))
            fh.seek(0)
            tar.addfile(info, fh)
        return digest
    except OSError:
        return None
    finally:
        os.close(parent)
