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


Manifest = Mapping[str, Entry]  # workspace-relative POSIX path -> entry


def entry_of(st: os.stat_result, path: Path) -> Entry | None:
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISLNK(st.st_mode):
        return Entry("link", 0, 0, 0, os.readlink(path))
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


def take_manifest(workspace: Path, *, exclude: Iterable[Path] = ()) -> dict[str, Entry]:
    """Every syncable entry under ``workspace`` except ``exclude`` (hidden paths)."""
    excluded = {Path(p) for p in exclude}
    found: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(workspace):
        base = Path(dirpath)
        dirnames[:] = [d for d in dirnames if (base / d) not in excluded]
        for name in dirnames + filenames:
            path = base / name
            if path in excluded:
                continue
            try:
                entry = entry_of(os.lstat(path), path)
            except OSError:
                continue  # vanished while walking
            if entry is not None:
                found[path.relative_to(workspace).as_posix()] = entry
    return found


def changes(old: Manifest, new: Manifest) -> tuple[list[str], list[str]]:
    """(entries to send, entries to remove first): new or changed, and gone or
    changed kind (a file that became a directory must be removed before)."""
    send = sorted(rel for rel, entry in new.items() if old.get(rel) != entry)
    remove = sorted(rel for rel, entry in old.items()
                    if rel not in new or new[rel].kind != entry.kind)
    return send, remove


def pack(workspace: Path, names: Collection[str], out: IO[bytes]) -> dict[str, str]:
    """Archive the workspace entries ``names`` (parents first) into ``out``;
    return the content digest of each regular file sent.

    Owners are dropped so the sandbox user owns what it extracts.
    """
    digests: dict[str, str] = {}
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(names):
            path = workspace / rel
            try:
                info = tar.gettarinfo(str(path), rel)
            except OSError:
                continue  # vanished: the next manifest will notice
            if info is not None and info.islnk():  # a hardlink goes as a copy, not a link
                info.type, info.linkname, info.size = tarfile.REGTYPE, "", os.lstat(path).st_size
            if info is None or not (info.isreg() or info.isdir() or info.issym()):
                continue
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = int(info.mtime)  # a float mtime costs a pax header per member
            if info.isreg():
                try:
                    with open(path, "rb") as fh:
                        digest = content_digest(fh, bool(info.mode & 0o100))
                        fh.seek(0)
                        tar.addfile(info, fh)
                except OSError:
                    continue
                digests[rel] = digest
            else:
                tar.addfile(info)
    return digests
