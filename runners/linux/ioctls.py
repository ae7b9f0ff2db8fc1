"""The ioctl commands the seccomp rules refuse to every constrained command, and why these.

An ioctl acts through any open file descriptor, a read-only one included.
Landlock checks rights when a file is opened, not what an ioctl does on it
(its ioctl right covers device files only), and the filesystem handlers below
check the inode's owner (or nothing) and that the *mount* is writable, never
that the fd was opened for writing.  So a command allowed only to read a host
file it owns (root owns most of them) could still change that file, or the
filesystem, through these.  A read-only bind mount (bwrap, docker) stops the
ones that need a writable mount but not those that act on the filesystem as a
whole, and a root caller's uid 0 owns the host's files there too.

Each command is matched on its type and number only (mask ``0xFFFF``): the
size and direction bits vary between the 32-bit and 64-bit variants of one
command (``FS_IOC_SETFLAGS`` is ``0x40086602`` and ``0x40046602``), and the
handler of a type/number pair is the same code either way.

Refused: changes an inode or a filesystem through a read-only fd, no
capability needed:

- ``FS_IOC_SETFLAGS`` and ``FS_IOC_FSSETXATTR``: inode flags (immutable,
  append-only, project id);
- ``FS_IOC_SETVERSION`` and ext4's ``EXT4_IOC_SETVERSION``: the inode
  generation (and its ctime);
- ``FS_IOC_ENABLE_VERITY``: makes a file read-only for good (it wants a
  read-only fd by design);
- fscrypt: ``FS_IOC_SET_ENCRYPTION_POLICY`` (an empty directory the caller
  owns), ``FS_IOC_ADD_ENCRYPTION_KEY``/``FS_IOC_REMOVE_ENCRYPTION_KEY``
  (``_ALL_USERS``): the filesystem's keyring, shared by the whole host;
  ``FS_IOC_GET_ENCRYPTION_PWSALT``, which on ext4 writes a salt into the
  superblock the first time;
- ``FIDEDUPERANGE``: its destination may be a read-only fd of a file the
  caller owns (the data stays, its extents change);
- ext4: ``EXT4_IOC_MIGRATE`` and ``EXT4_IOC_ALLOC_DA_BLKS`` rewrite the block
  map of a file the caller owns;
- btrfs: snapshot and subvolume creation (``SNAP_CREATE``, ``SUBVOL_CREATE``
  and their ``_V2``: the fd is a directory's, always read-only; only the
  directory's mode bits are checked), ``SNAP_DESTROY`` (``_V2``), ``DEFRAG``
  (``_RANGE``), ``SUBVOL_SETFLAGS`` (makes a subvolume read-only),
  ``SET_RECEIVED_SUBVOL``.  ``START_SYNC`` shares its number with
  ``SUBVOL_CREATE_V2`` and is refused with it;
- vfat: ``FAT_IOCTL_SET_ATTRIBUTES`` (hidden, system, read-only), owner only:
  on a vfat mount such as the EFI partition, root owns every file.

Refused although they need a capability every runner drops, because their
effect is host-wide: ``FIFREEZE``/``FITHAW``/``FITRIM``, ``FS_IOC_SHUTDOWN``,
``FS_IOC_SETFSLABEL``, and ext4's resize, ``CHECKPOINT`` and ``SETFSUUID``.

Refused on the terminal: ``TIOCSTI`` and ``TIOCLINUX`` type into it.

Kept, because they only read, or need an fd open for writing (which Landlock
and read-only mounts decide): ``FIEMAP``, ``FIGETBSZ``, ``FIONREAD``,
``FIONBIO``/``FIOCLEX``, every terminal ioctl but the two above,
``FS_IOC_GETFLAGS``/``FS_IOC_GETVERSION``/``FS_IOC_FSGETXATTR``,
``FS_IOC_MEASURE_VERITY``, ``FICLONE``/``FICLONERANGE`` (``cp --reflink``),
ext4's ``MOVE_EXT``/``SWAP_BOOT`` and XFS's space and extent-swap ioctls.
"""

from __future__ import annotations

from collections.abc import Mapping

#: What a refusal compares: the type byte and the number, not the size or direction.
MASK = 0xFFFF

_F, _V, _X, _BTRFS, _FAT, _TTY = ord("f"), ord("v"), ord("X"), 0x94, ord("r"), ord("T")


def _key(kind: int, nr: int) -> int:
    return kind << 8 | nr


#: Name -> ``(type << 8) | number`` of each refused command.
INODE_CHANGES: Mapping[str, int] = {
    "FS_IOC_SETFLAGS": _key(_F, 2),
    "FS_IOC_FSSETXATTR": _key(_X, 32),
    "FS_IOC_SETVERSION": _key(_V, 2),
    "EXT4_IOC_SETVERSION": _key(_F, 4),
    "FS_IOC_ENABLE_VERITY": _key(_F, 133),
    "FS_IOC_SET_ENCRYPTION_POLICY": _key(_F, 19),
    "FS_IOC_GET_ENCRYPTION_PWSALT": _key(_F, 20),
    "FS_IOC_ADD_ENCRYPTION_KEY": _key(_F, 23),
    "FS_IOC_REMOVE_ENCRYPTION_KEY": _key(_F, 24),
    "FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS": _key(_F, 25),
    "FIDEDUPERANGE": _key(_BTRFS, 54),
    "EXT4_IOC_MIGRATE": _key(_F, 9),
    "EXT4_IOC_ALLOC_DA_BLKS": _key(_F, 12),
    "BTRFS_IOC_SNAP_CREATE": _key(_BTRFS, 1),
    "BTRFS_IOC_DEFRAG": _key(_BTRFS, 2),
    "BTRFS_IOC_SUBVOL_CREATE": _key(_BTRFS, 14),
    "BTRFS_IOC_SNAP_DESTROY": _key(_BTRFS, 15),
    "BTRFS_IOC_DEFRAG_RANGE": _key(_BTRFS, 16),
    "BTRFS_IOC_SNAP_CREATE_V2": _key(_BTRFS, 23),
    "BTRFS_IOC_SUBVOL_CREATE_V2": _key(_BTRFS, 24),
    "BTRFS_IOC_SUBVOL_SETFLAGS": _key(_BTRFS, 26),
    "BTRFS_IOC_SET_RECEIVED_SUBVOL": _key(_BTRFS, 37),
    "BTRFS_IOC_SNAP_DESTROY_V2": _key(_BTRFS, 63),
    "FAT_IOCTL_SET_ATTRIBUTES": _key(_FAT, 0x11),
    # Capability-gated, host-wide:
    "FIFREEZE": _key(_X, 119),
    "FITHAW": _key(_X, 120),
    "FITRIM": _key(_X, 121),
    "FS_IOC_SHUTDOWN": _key(_X, 125),
    "FS_IOC_SETFSLABEL": _key(_BTRFS, 50),
    "EXT4_IOC_GROUP_EXTEND": _key(_F, 7),
    "EXT4_IOC_GROUP_ADD": _key(_F, 8),
    "EXT4_IOC_RESIZE_FS": _key(_F, 16),
    "EXT4_IOC_CHECKPOINT": _key(_F, 43),
    "EXT4_IOC_SETFSUUID": _key(_F, 44),
}

TERMINAL: Mapping[str, int] = {"TIOCSTI": _key(_TTY, 0x12), "TIOCLINUX": _key(_TTY, 0x1C)}

#: Setting a SIGIO owner: the pid is behind a pointer, so the spawner-thread guard refuses them.
SIGIO_OWNERS: Mapping[str, int] = {"FIOSETOWN": 0x8901, "SIOCSPGRP": 0x8902}
