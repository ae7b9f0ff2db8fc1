"""The protected-file search's directory listings, kept from one run to the next.

Without them every ``dsh-sandbox run`` lists every directory of the workspace
afresh (about 2 s for a million entries); with them a run lists only the
directories whose entries changed, and ``lstat``s the others.

A listing stands for what a directory held, so a forged or stale one would
hide a repository or a protected name from the search.  What makes them safe
to keep:

- they live in dsh-sandbox's own cache directory, opened without following a
  link and owned by this uid with mode 0700 (``open_own_dir``); no run may
  have that directory as a writable root or inside one (``own_state``), and
  a file is read only when this uid owns it and no one else may write it;
- a listing is used only while its directory's device, inode and ctime are
  what they were when it was made: the kernel sets the ctime on every entry
  made, removed or renamed in it, and no process without ``CAP_SYS_TIME``
  can set it back;
- only listings of local filesystems whose ctime this kernel keeps (ext4,
  xfs, btrfs, tmpfs, ...) are kept: a network or FUSE filesystem reports
  what its server says;
- a directory changed in the last ``RACY_NS`` before it was listed is not
  kept: a change in the same clock tick as the listing could leave its ctime
  as it was (the protected-file search lists such a one again every time);
- the file carries a checksum of its content, checked before it is read
  (against a torn or damaged file: only this uid can write it).
"""

from __future__ import annotations

import marshal
import os
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path

#: A directory whose ctime is this recent when it is listed is listed again next time.
RACY_NS = 2_000_000_000
#: Filesystems whose ctime the kernel itself keeps on this machine.
LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs", "overlay", "zfs", "jfs",
                               "reiserfs", "nilfs2", "bcachefs"})
_FORMAT = 1
_CHECKSUM = 4

#: One directory: (dev, ino, ctime_ns), subdirs, repos, named, entries, git_dir, links.
Row = tuple[tuple[int, int, int], tuple[str, ...], tuple[tuple[str, int], ...], tuple[tuple[str, int], ...],
            int, bool, tuple[str, ...]]


def local_devices(mountinfo: str = "/proc/self/mountinfo") -> frozenset[int]:
    """The device numbers of the mounted local filesystems (``LOCAL_FILESYSTEMS``)."""
    found: set[int] = set()
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return frozenset()
    for line in lines:
        fields = line.split()
        if "-" not in fields:
            continue
        fstype = fields[fields.index("-") + 1]
        major, _, minor = fields[2].partition(":")
        if fstype in LOCAL_FILESYSTEMS and major.isdigit() and minor.isdigit():
            found.add(os.makedev(int(major), int(minor)))
    return frozenset(found)


def _cache_dir() -> Path | None:
    from dsh.sandbox.own_state import cache_base

    base = cache_base()
    return None if base is None else base / "dsh-sandbox" / "tree-index"


def _file_name(root: str, names_key: str) -> str:
    # Two roots sharing a name only take turns: the file names its root and names.
    return f"{zlib.crc32(root.encode()):08x}{zlib.crc32(names_key.encode()):08x}"


def load(root: str, names_key: str) -> dict[str, Row]:
    """The listings kept for ``root`` under the protected names ``names_key``;
    empty when there are none or they cannot be trusted."""
    from dsh.sandbox.own_dirs import read_regular_file

    where = _cache_dir()
    if where is None:
        return {}
    read = read_regular_file(str(where / _file_name(root, names_key)))
    if read is None:
        return {}
    info, data = read
    # Ours and no one else's to write: whatever wrote it could hide a repository.
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        return {}
    checksum, body = data[:_CHECKSUM], data[_CHECKSUM:]
    if zlib.crc32(body).to_bytes(_CHECKSUM, "big") != checksum:
        return {}
    try:
        version, kept_root, kept_names, rows = marshal.loads(body)
    except (EOFError, ValueError, TypeError):
        return {}
    if version != _FORMAT or kept_root != root or kept_names != names_key or not isinstance(rows, dict):
        return {}
    return rows


def save(root: str, names_key: str, rows: Mapping[str, Row]) -> None:
    """Keep ``rows`` for ``root`` (best effort: a cache that cannot be written
    only costs the next run a full listing)."""
    from dsh.sandbox.errors import DshError
    from dsh.sandbox.own_dirs import open_own_dir, replace_file

    where = _cache_dir()
    if where is None:
        return
    # Plain tuples: marshal writes no tuple subclass (a caller's named tuples).
    body = marshal.dumps((_FORMAT, root, names_key, {path: tuple(row) for path, row in rows.items()}))
    data = zlib.crc32(body).to_bytes(_CHECKSUM, "big") + body
    try:
        own = open_own_dir(where, "protected-file search cache", "the search lists every directory instead")
    except DshError:
        return
    try:
        replace_file(own, _file_name(root, names_key), data)
    finally:
        own.close()


def names_key(names: Iterable[str]) -> str:
    """What the listings depend on besides the tree: the names searched for."""
    return "\0".join(sorted(names))
