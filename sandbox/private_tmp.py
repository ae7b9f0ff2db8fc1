"""The session's private temporary directory: the command's ``/tmp`` and ``$TMPDIR``.

The host's ``/tmp`` is shared scratch space: CI checkouts, clones, other
workspaces and other users' files live there, at any depth, and the host's
tools later run what they find in them (a repository's hooks and
``core.fsmonitor`` on the next ``git status``).  Searching all of it before
every command is slow and, where another user's directory cannot be listed,
impossible.  So a constrained command gets a temporary directory of its own:

- one per session, made on the host with mode 0700 under a directory of the
  caller's (``$XDG_RUNTIME_DIR/dsh-sandbox/tmp``, else ``$XDG_CACHE_HOME`` or
  ``~/.cache`` ``/dsh-sandbox/tmp``, else ``/var/tmp/dsh-sandbox-tmp-<uid>``),
  never inside ``/tmp``, ``$TMPDIR`` or another writable root, and never
  reached through a link a command could have planted (``own_dirs``): made,
  listed and removed through fds;
- ``$TMPDIR`` names it; runners with a mount namespace also show it at
  ``/tmp`` (the host's ``/tmp`` is then invisible);
- held with an exclusive ``flock`` while the session lives and removed when
  it closes; a session killed before that leaves a directory nobody holds,
  which the next session removes.

The shared ``/tmp`` is writable only when a profile asks for it
(``tmp = "shared"``), and then it is searched at any depth like the workspace.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path

from dsh.sandbox.errors import ConfigError
from dsh.sandbox.own_dirs import open_own_dir, remove_tree
from dsh.sandbox.own_state import cache_base, runtime_dir
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_paths import canonical

PRIVATE = "private"
SHARED = "shared"
TMP_SETTINGS = (PRIVATE, SHARED)

_PREFIX = "session-"
#: A directory nobody holds is a dead session's only when it is this old: a
#: new session locks its directory a moment after making it.
_STALE_AFTER_S = 60.0
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def candidates(environ: Mapping[str, str], uid: int) -> list[Path]:
    """Where the session directories may live, best first."""
    out: list[Path] = []
    runtime = runtime_dir(environ)
    if runtime is not None:
        out.append(runtime / "dsh-sandbox" / "tmp")
    cache = cache_base(environ)
    if cache is not None:
        out.append(cache / "dsh-sandbox" / "tmp")
    out.append(Path("/var/tmp") / f"dsh-sandbox-tmp-{uid}")
    return out


def _overlaps(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents or path in r.parents for r in roots)


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class PrivateTmp:
    """One session's directory, locked while the session lives.  Dropped
    without ``close``, it releases its descriptors (and so its lock) when
    collected; the directory is then pruned by a later session."""

    def __init__(self, path: Path, fd: int, base_fd: int | None = None) -> None:
        self.path = path
        self._fd: int | None = fd
        #: The directory that holds it, opened without following a link: the
        #: session directory is removed through it, never by name.
        self._base_fd = base_fd
        self._release = weakref.finalize(self, _close_fds, [fd, *([base_fd] if base_fd is not None else [])])

    @classmethod
    def create(cls, avoid: Iterable[Path], environ: Mapping[str, str] = os.environ) -> PrivateTmp:
        """A fresh directory outside ``avoid`` (the shared temporary dirs and
        the other writable roots); ``ConfigError`` when no candidate will do."""
        # ``canonical``: a root another run swaps for a link meanwhile is a
        # clean error, never an OSError from realpath.
        avoided = [canonical(p) for p in avoid]
        problems: list[str] = []

        def refuse(base: Path) -> str | None:
            return "lies in a shared or writable directory" if _overlaps(base, avoided) else None

        for candidate in candidates(environ, os.geteuid()):
            try:
                base = open_own_dir(candidate, "private /tmp", _FIX, refuse)
            except ConfigError as exc:
                problems.append(str(exc).removesuffix("; " + _FIX))
                continue
            try:
                name = _make_session_dir(base.fd)
                fd = os.open(name, _DIR_FLAGS, dir_fd=base.fd)
            except OSError as exc:
                base.close()
                problems.append(f"{base.path}: {exc.strerror or exc}")
                continue
            fcntl.flock(fd, fcntl.LOCK_EX)
            _prune(base.fd, keep=name)
            return cls(base.path / name, fd, base.fd)
        raise ConfigError(
            "private /tmp: no directory of yours can hold it (" + "; ".join(problems) + "); " + _FIX
        )

    def close(self) -> None:
        """Remove the directory and everything the commands left in it."""
        fd, self._fd = self._fd, None
        base_fd, self._base_fd = self._base_fd, None
        if fd is None:
            return
        try:
            if base_fd is not None:
                _remove(base_fd, self.path.name, fd)
        finally:
            self._release()


_FIX = 'set XDG_RUNTIME_DIR or HOME to a directory you own, or write tmp = "shared" in the profile'


def _make_session_dir(base_fd: int) -> str:
    """A new, empty 0700 directory in ``base_fd`` (``tempfile`` would cost the
    CLI's start-up an import of ``random``)."""
    for _ in range(100):
        name = _PREFIX + os.urandom(6).hex()
        try:
            os.mkdir(name, 0o700, dir_fd=base_fd)
        except FileExistsError:
            continue
        return name
    raise FileExistsError(errno.EEXIST, "no free session name")


def _remove(base_fd: int, name: str, fd: int) -> None:
    """Remove ``name`` in ``base_fd`` if it is still the directory ``fd``
    holds; through fds only, no link followed."""
    try:
        here = os.stat(name, dir_fd=base_fd, follow_symlinks=False)
    except OSError:
        return
    mine = os.fstat(fd)
    if (here.st_dev, here.st_ino) != (mine.st_dev, mine.st_ino):
        return  # renamed or replaced: not ours to remove by this name
    with contextlib.suppress(OSError):
        remove_tree(base_fd, name)


def _prune(base_fd: int, keep: str) -> None:
    """Remove the directories of sessions that died without closing."""
    now = time.time()
    try:
        names = [n for n in os.listdir(base_fd) if n.startswith(_PREFIX) and n != keep]
    except OSError:
        return
    for name in names:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=base_fd)
        except OSError:
            continue
        try:
            if now - os.fstat(fd).st_ctime < _STALE_AFTER_S:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live session holds it
            _remove(base_fd, name, fd)
        finally:
            os.close(fd)


def describe_tmp(policy: SandboxPolicy) -> str:
    """The ``explain`` line for the command's temporary directory (workspace-write)."""
    if policy.private_tmp is not None:
        return (f"tmp: private {policy.private_tmp} (the session's own, removed when it ends; $TMPDIR "
                "names it and runners with a mount namespace show it at /tmp; the host's /tmp is not "
                "writable)")
    if Path("/tmp") in policy.writable_roots:
        return "tmp: shared (the host's /tmp and $TMPDIR are writable roots, searched at any depth)"
    return "tmp: none writable (exclude_tmp)"
