"""Sync-back: the sandbox's workspace archive, checked, onto the host workspace.

Sync-back trusts nothing in the archive: the sandbox may have run anything as
root.  ``plan_sync_back`` validates *every* member and every host destination
before ``apply_sync_back`` writes *any* file, so a bad archive leaves the host
untouched.  Only regular files under the workspace come back; a hardlink,
device, fifo, absolute name, ``..`` component, or a destination that is a
symlink or directory on the host rejects the whole archive.  A symlink the
command made is never created on the host, but it does not cost the rest of
the work either (a venv or a build tree has some): it is left out and
reported, like a protected path.  Protected
paths are never written back (that is how they stay read-only with this
runner); changed ones are reported.  Symlinks the host already has with the same
target (synced in, untouched) are left alone.  Each file is written atomically (temp
file in the same directory, then ``rename``), through directory descriptors
opened with ``O_NOFOLLOW`` so a host symlink in a parent is never followed.
A regular file the last sync had, that is unchanged on the host and missing
from the archive, was deleted in the sandbox: it is deleted on the host too
(moved aside with the rest of the commit, so a failure restores it).
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from dsh.runners.e2b.manifest import Entry, content_digest, entry_of
from dsh.sandbox.errors import DshError
from dsh.sandbox.protected_scan import DEFAULT_PROTECTED_NAMES, GIT_CONTROL_PARTS

# Names never synced back, in every directory (the policy adds its own canonical
# paths): a repository, or a config a later host action runs, made or changed
# in the sandbox stays there, whatever the git option says.
ALWAYS_PROTECTED_NAMES = frozenset((".git", ".dsh", *DEFAULT_PROTECTED_NAMES))
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SyncBackRefused(DshError):
    """The sandbox's archive has a member that must not reach the host."""

    code = "SYNC_BACK_REFUSED"


@dataclass(frozen=True)
class FileUpdate:
    parts: tuple[str, ...]  # path components under the workspace
    member: tarfile.TarInfo


@dataclass(frozen=True)
class SyncPlan:
    updates: tuple[FileUpdate, ...]
    skipped_protected: tuple[str, ...]
    deletions: tuple[tuple[str, ...], ...] = ()
    #: (path, content digest) of every unprotected regular file in the sandbox
    digests: tuple[tuple[str, str], ...] = ()
    #: symlinks the command made: left in the sandbox, never created on the host
    skipped_links: tuple[str, ...] = ()



def plan_sync_back(
    archive: IO[bytes], workspace: Path, protected: Iterable[Path],
    previous: Mapping[str, Entry] | None = None, synced: Mapping[str, str] | None = None,
    *, git_commit: bool = False,
) -> SyncPlan:
    """Validate every member and destination; return what to write.  Writes nothing.

    ``previous``: the manifest of the last sync; without it nothing is deleted.
    ``synced``: content digests of the sandbox's files as of the last sync; a file
    whose digest is unchanged was not touched by the command, so the host's copy
    stands even if the host changed it meanwhile (without it, every file that
    differs from the host is written).  ``git_commit``: the policy lets git
    commit (``git = "commit"``): what a commit writes inside a ``.git``
    directory (objects, refs, index, logs) comes back; its control parts
    (hooks, config, info, ...) never do.
    """
    protected_paths = tuple(Path(p) for p in protected)
    updates: list[FileUpdate] = []
    skipped: list[str] = []
    links: list[str] = []
    digests: list[tuple[str, str]] = []
    kinds: dict[tuple[str, ...], str] = {}
    try:
        tar = tarfile.open(fileobj=archive, mode="r:")
        members = tar.getmembers()
    except (tarfile.TarError, EOFError) as exc:
        raise SyncBackRefused(f"the sandbox's archive is not a valid tar: {exc}") from exc
    for member in members:
        parts = _member_parts(member.name)
        if not parts:
            if not member.isdir():
                raise SyncBackRefused(f"member {member.name!r} names the workspace itself")
            continue
        kind = "link" if _unchanged_symlink(workspace, parts, member) else _member_kind(member)
        for depth in range(1, len(parts)):
            if kinds.setdefault(parts[:depth], "dir") != "dir":
                raise SyncBackRefused(f"member {member.name!r} is inside a file")
        if kinds.setdefault(parts, kind) != kind:
            raise SyncBackRefused(f"member {member.name!r} appears as both file and directory")
        if kind in ("dir", "link"):
            continue  # directories are made as needed; an unchanged symlink needs nothing
        if kind == "symlink":
            links.append("/".join(parts))  # anything below it is refused above, as inside a file
            continue
        host, rel = workspace.joinpath(*parts), "/".join(parts)
        source = tar.extractfile(member)
        digest = content_digest(source, bool(member.mode & 0o100)) if source else ""
        if synced is not None and synced.get(rel) == digest:
            continue  # untouched by the command
        if _is_protected(parts, host, protected_paths, git_commit):
            if _differs(workspace, parts, member, tar):
                skipped.append(rel)
            continue
        digests.append((rel, digest))
        _check_destination(workspace, parts)
        if _differs(workspace, parts, member, tar):
            updates.append(FileUpdate(parts, member))
    tar.close()
    deletions = _deletions(workspace, previous or {}, kinds, protected_paths, skipped, git_commit)
    return SyncPlan(tuple(updates), tuple(skipped), deletions, tuple(digests), tuple(links))


def _deletions(workspace: Path, previous: Mapping[str, Entry],
               kinds: Mapping[tuple[str, ...], str], protected: tuple[Path, ...],
               skipped: list[str], git_commit: bool) -> tuple[tuple[str, ...], ...]:
    """Files of the last sync that the sandbox no longer has and the host did not touch."""
    gone: list[tuple[str, ...]] = []
    for rel, entry in sorted(previous.items()):
        parts = tuple(rel.split("/"))
        if entry.kind != "file" or parts in kinds:
            continue
        host = workspace.joinpath(*parts)
        try:
            _check_destination(workspace, parts)
            now = entry_of(os.lstat(host), host)
        except (OSError, SyncBackRefused):
            continue  # already gone, or no longer the file we synced
        if now != entry:
            continue  # changed on the host since: the host's version wins
        if _is_protected(parts, host, protected, git_commit):
            skipped.append(rel)
            continue
        gone.append(parts)
    return tuple(gone)


def apply_sync_back(archive: IO[bytes], workspace: Path, plan: SyncPlan, *, root_fd: int | None = None) -> None:
    """Stage every update as a temp file, then rename them all into place.

    ``root_fd``: the workspace's pin: writes go below the directory the policy
    resolved, whatever its name points at now."""
    archive.seek(0)
    dirs = _DirCache(workspace, root_fd=root_fd)
    # (dir, temp name or None for a deletion, final name)
    staged: list[tuple[tuple[str, ...], str | None, str]] = []
    try:
        with tarfile.open(fileobj=archive, mode="r:") as tar:
            for update in plan.updates:
                parent = update.parts[:-1]
                temp = f".{update.parts[-1]}.dsh-sync-{os.getpid()}-{len(staged)}"
                _write_member(tar, update.member, dirs.open(parent), temp)
                staged.append((parent, temp, update.parts[-1]))
        staged += [(parts[:-1], None, parts[-1]) for parts in plan.deletions]
        for parent, _, final in staged:  # the host may have changed since planning
            _check_still_file_or_missing(dirs.open(parent), (*parent, final))
        _commit(dirs, staged)
    except BaseException:
        # A failure (disk full, a destination that changed...): remove every temp
        # file and directory this made, so the host is as it was.
        for parent, leftover, _ in staged:
            if leftover is None:
                continue
            try:
                os.unlink(leftover, dir_fd=dirs.open(parent))
            except OSError:
                pass
        dirs.remove_created()
        raise
    finally:
        dirs.close()


def _check_still_file_or_missing(dir_fd: int, parts: tuple[str, ...]) -> None:
    try:
        st = os.lstat(parts[-1], dir_fd=dir_fd)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise SyncBackRefused(f"{'/'.join(parts)}: is no longer a regular file on the host")


def _commit(dirs: _DirCache, staged: list[tuple[tuple[str, ...], str | None, str]]) -> None:
    """Move every replaced or deleted file aside, rename the temp files into
    place, then drop what was moved aside; on a failure put everything back.

    Directories are named by their parts and reopened through ``dirs`` each
    time (its descriptors may be recycled)."""
    done: list[tuple[tuple[str, ...], str | None, str, str | None]] = []
    try:
        for index, (parent, temp, final) in enumerate(staged):
            fd = dirs.open(parent)
            backup: str | None = f".{final}.dsh-old-{os.getpid()}-{index}"
            try:
                os.rename(final, str(backup), src_dir_fd=fd, dst_dir_fd=fd)
            except FileNotFoundError:
                backup = None
            if temp is not None:
                try:
                    os.rename(temp, final, src_dir_fd=fd, dst_dir_fd=fd)
                except BaseException:
                    if backup is not None:
                        os.rename(backup, final, src_dir_fd=fd, dst_dir_fd=fd)
                    raise
            done.append((parent, temp, final, backup))
    except BaseException:
        for parent, temp, final, backup in reversed(done):
            fd = dirs.open(parent)
            if temp is not None:
                os.rename(final, temp, src_dir_fd=fd, dst_dir_fd=fd)  # unlinked by the caller
            if backup is not None:
                os.rename(backup, final, src_dir_fd=fd, dst_dir_fd=fd)
        raise
    staged.clear()
    for parent, _, _, backup in done:
        if backup is not None:
            os.unlink(backup, dir_fd=dirs.open(parent))


class _DirCache:
    """Directory fds under the workspace, opened component by component with
    ``O_NOFOLLOW`` (never through a symlink); at most ``limit`` kept open."""

    def __init__(self, workspace: Path, limit: int = 128, *, root_fd: int | None = None) -> None:
        self.root = os.open(workspace, _DIR_FLAGS) if root_fd is None else os.open(".", _DIR_FLAGS, dir_fd=root_fd)
        self.fds: dict[tuple[str, ...], int] = {}
        self.created: list[tuple[str, ...]] = []
        self.limit = limit

    def open(self, parts: tuple[str, ...]) -> int:
        if not parts:
            return self.root
        if parts in self.fds:
            return self.fds[parts]
        parent = self.open(parts[:-1])
        try:
            os.mkdir(parts[-1], 0o755, dir_fd=parent)
            self.created.append(parts)
        except FileExistsError:
            pass
        try:
            fd = os.open(parts[-1], _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise SyncBackRefused(f"{'/'.join(parts)}: not a directory on the host") from exc
            raise
        if len(self.fds) >= self.limit:
            self._close_cached(keep=parts[:-1])
        self.fds[parts] = fd
        return fd

    def _close_cached(self, keep: tuple[str, ...]) -> None:
        for key in [k for k in self.fds if k != keep[: len(k)] or len(k) > len(keep)]:
            os.close(self.fds.pop(key))

    def remove_created(self) -> None:
        for parts in reversed(self.created):
            try:
                os.rmdir(parts[-1], dir_fd=self.open(parts[:-1]))
            except OSError:
                pass

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        os.close(self.root)


def _member_parts(name: str) -> tuple[str, ...]:
    if name.startswith("/") or "\0" in name:
        raise SyncBackRefused(f"member {name!r} has an absolute path")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise SyncBackRefused(f"member {name!r} has a '..' component")
    return parts


def _member_kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return "dir"
    if member.type in (tarfile.REGTYPE, tarfile.AREGTYPE) and not member.issparse():
        return "file"
    if member.issym():
        return "symlink"
    what = {tarfile.LNKTYPE: "a hardlink",
            tarfile.FIFOTYPE: "a fifo", tarfile.CHRTYPE: "a character device",
            tarfile.BLKTYPE: "a block device"}.get(member.type, f"of type {member.type!r}")
    raise SyncBackRefused(f"member {member.name!r} is {what}, not a regular file")


def _unchanged_symlink(workspace: Path, parts: tuple[str, ...], member: tarfile.TarInfo) -> bool:
    """A symlink the host already has, with the same target (synced in, untouched)."""
    if not member.issym() or not parts:
        return False
    host = workspace.joinpath(*parts)
    return host.is_symlink() and os.readlink(host) == member.linkname


def _is_protected(parts: tuple[str, ...], host: Path, protected: tuple[Path, ...], git_commit: bool = False) -> bool:
    for i, part in enumerate(parts):
        if part not in ALWAYS_PROTECTED_NAMES:
            continue
        # Under ``git = "commit"`` a commit's own files inside a ``.git``
        # directory come back; a ``.git`` file, the directory's control parts
        # and anything named ``.git`` deeper stay protected.
        inside = parts[i + 1:]
        if not (git_commit and part == ".git" and inside and inside[0] not in GIT_CONTROL_PARTS
                and ".git" not in inside):
            return True
    if any(f"{a}/{b}" in ALWAYS_PROTECTED_NAMES for a, b in itertools.pairwise(parts)):
        return True  # a ``dir/file`` name such as ``.cargo/config.toml``
    return any(host == p or p in host.parents for p in protected)


def _check_destination(workspace: Path, parts: tuple[str, ...]) -> None:
    """Every host ancestor must be a real directory (or missing), the file a file."""
    path = workspace
    for depth, part in enumerate(parts):
        path = path / part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        last = depth == len(parts) - 1
        if stat.S_ISLNK(st.st_mode):
            raise SyncBackRefused(f"{'/'.join(parts)}: {path} is a symlink on the host")
        if last and not stat.S_ISREG(st.st_mode):
            raise SyncBackRefused(f"{'/'.join(parts)}: {path} is not a regular file on the host")
        if not last and not stat.S_ISDIR(st.st_mode):
            raise SyncBackRefused(f"{'/'.join(parts)}: {path} is not a directory on the host")


def _differs(workspace: Path, parts: tuple[str, ...], member: tarfile.TarInfo,
             tar: tarfile.TarFile) -> bool:
    host = workspace.joinpath(*parts)
    try:
        st = os.lstat(host)
    except FileNotFoundError:
        return True
    if st.st_size != member.size or stat.S_IMODE(st.st_mode) & 0o111 != member.mode & 0o111:
        return True
    source = tar.extractfile(member)
    if source is None:
        return True
    with source, open(host, "rb") as fh:
        while True:
            a, b = source.read(1 << 20), fh.read(1 << 20)
            if a != b:
                return True
            if not a:
                return False


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dir_fd: int, name: str) -> None:
    source = tar.extractfile(member)
    mode = 0o755 if member.mode & 0o100 else 0o644
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as out:
        if source is not None:
            while chunk := source.read(1 << 20):
                out.write(chunk)
        out.flush()  # before utime: a later flush would set mtime again
        os.fchmod(out.fileno(), mode)
        os.utime(out.fileno(), (member.mtime, member.mtime))
