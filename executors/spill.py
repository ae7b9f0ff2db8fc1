"""Where spill files live, and how they are made, read back and removed.

A spill file holds a stream beyond the in-memory cap, written by this (host)
process while the command runs.  If the command could reach the directory
that holds it, it could put a symlink where the host is about to create a
file (the host would write root-owned bytes of the command's choosing into
any directory), or a FIFO where the host reads.  So the directory:

- lies outside every root the session's policy can make writable (``/tmp``
  and ``$TMPDIR`` always count as such roots); the first candidate that does is
  used: ``$XDG_RUNTIME_DIR/dsh-sandbox/spill``, ``$XDG_CACHE_HOME`` (or
  ``~/.cache``) ``/dsh-sandbox/spill``, ``/var/tmp/dsh-sandbox-<uid>``; none:
  ``SpillUnavailable`` (the stream keeps its in-memory tail only);
- is 0700 and owned by the caller, reached without following a link a
  command could have planted (``own_dirs``), and used only through a directory fd: files are made
  with ``openat(O_EXCL|O_NOFOLLOW)``, read back with ``pread`` on the fd the
  host already holds, and removed with ``unlinkat``.

Retention: each service spills into its own ``session-*`` directory.  A
library session removes it when it closes; a session that hands spill paths
to a person (the CLI prints them) keeps it, so the path stays readable after
the command ends.  Either way, when a session starts spilling it first prunes
the directory (per user: it is the user's own): sessions older than
``MAX_AGE_S`` go, then the oldest others until what is left holds at most
``MAX_TOTAL_BYTES``.  Pruning works by fd and never follows a link.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from dsh.sandbox.own_dirs import first_own_dir, remove_tree
from dsh.sandbox.own_state import spill_candidates

MAX_AGE_S = 24 * 3600
#: What earlier sessions may keep in one user's spill directory.
MAX_TOTAL_BYTES = 256 * 1024 * 1024
_SESSION_PREFIX = "session-"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


_FIX = "set XDG_RUNTIME_DIR to a private directory outside them"


class SpillUnavailable(OSError):
    """No candidate directory is private and outside the writable roots."""


def candidates(environ: Mapping[str, str], uid: int) -> list[tuple[Path, tuple[str, ...]]]:
    """Spill directories to try, best first (``own_state.spill_candidates``,
    which also hides them from every run)."""
    return spill_candidates(environ, uid)


def _overlaps(path: Path, roots: Iterable[Path]) -> Path | None:
    for root in roots:
        if path == root or path.is_relative_to(root) or root.is_relative_to(path):
            return root
    return None


def _size(parent_fd: int, name: str) -> int:
    """Bytes of the regular files directly in session directory ``name``
    (spill files are made only there); a link is not followed."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        return 0
    try:
        with os.scandir(fd) as entries:
            return sum(e.stat(follow_symlinks=False).st_size for e in entries
                       if e.is_file(follow_symlinks=False))
    finally:
        os.close(fd)


class SpillDir:
    """One session's spill directory, held open by fd."""

    def __init__(self, roots: Iterable[Path], environ: Mapping[str, str] | None = None) -> None:
        uid = os.geteuid()
        env = os.environ if environ is None else environ
        excluded = [Path(os.path.realpath(r)) for r in roots]
        excluded += [Path(os.path.realpath(t)) for t in ("/tmp", env.get("TMPDIR", "")) if os.path.isabs(t)]

        def refuse(base: Path) -> str | None:
            root = _overlaps(base, excluded)
            return None if root is None else f"overlaps the writable root {root}"

        own, tried = first_own_dir(candidates(env, uid), "spill directory", _FIX, refuse)
        if own is None:
            raise SpillUnavailable(
                errno.ENOENT,
                "no private spill directory outside the writable roots: tried " + "; ".join(tried) + "; " + _FIX,
            )
        self.base, self._base_fd = own.path, own.fd
        base = self.base
        self._expire()
        name = f"{_SESSION_PREFIX}{os.getpid()}-{os.urandom(6).hex()}"
        os.mkdir(name, 0o700, dir_fd=self._base_fd)
        self.name = name
        self.path = base / name
        self._fd = os.open(name, _DIR_FLAGS, dir_fd=self._base_fd)

    def create(self, stem: str) -> tuple[int, str]:
        """A new private file: ``(fd open for read and write, its path)``."""
        name = f"{stem}-{os.urandom(6).hex()}.log"
        fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=self._fd)
        return fd, str(self.path / name)

    def _expire(self) -> None:
        """Remove sessions older than ``MAX_AGE_S``, then the oldest others
        beyond ``MAX_TOTAL_BYTES`` (best effort: another session may be
        pruning too)."""
        limit = time.time() - MAX_AGE_S
        with os.scandir(self._base_fd) as entries:
            sessions = sorted(
                (e.stat(follow_symlinks=False).st_mtime, e.name)
                for e in entries
                if e.name.startswith(_SESSION_PREFIX)
            )
        kept: list[tuple[str, int]] = []
        for mtime, name in sessions:
            if mtime < limit:
                self._remove(name)
            else:
                kept.append((name, _size(self._base_fd, name)))
        total = sum(size for _, size in kept)
        for name, size in kept:  # oldest first
            if total <= MAX_TOTAL_BYTES:
                break
            self._remove(name)
            total -= size

    def _remove(self, name: str) -> None:
        try:
            remove_tree(self._base_fd, name)
        except OSError:
            pass  # another session is removing it too

    def close(self, *, remove: bool) -> None:
        os.close(self._fd)
        try:
            if remove:
                remove_tree(self._base_fd, self.name)
        finally:
            os.close(self._base_fd)
