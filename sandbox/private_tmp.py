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
  reached through a link;
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
import fcntl
import os
import stat
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from dsh.sandbox.errors import ConfigError
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_paths import canonical
from dsh.sandbox.sandbox_home import ensure_private_dir

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
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        out.append(Path(runtime) / "dsh-sandbox" / "tmp")
    cache = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):
        home = environ.get("HOME", "")
        cache = os.path.join(home, ".cache") if os.path.isabs(home) else ""
    if cache:
        out.append(Path(cache) / "dsh-sandbox" / "tmp")
    out.append(Path("/var/tmp") / f"dsh-sandbox-tmp-{uid}")
    return out


def _overlaps(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents or path in r.parents for r in roots)


class PrivateTmp:
    """One session's directory, locked while the session lives."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def create(cls, avoid: Iterable[Path], environ: Mapping[str, str] = os.environ) -> PrivateTmp:
        """A fresh directory outside ``avoid`` (the shared temporary dirs and
        the other writable roots); ``ConfigError`` when no candidate will do."""
        # ``canonical``: a root another run swaps for a link meanwhile is a
        # clean error, never an OSError from realpath.
        avoided = [canonical(p) for p in avoid]
        problems: list[str] = []
        for candidate in candidates(environ, os.geteuid()):
            base = canonical(candidate.parent) / candidate.name
            if _overlaps(base, avoided):
                problems.append(f"{base} lies in a shared or writable directory")
                continue
            try:
                ensure_private_dir(base, "private /tmp")
                made = _make_session_dir(base)
                fd = os.open(made, _DIR_FLAGS)
            except (ConfigError, OSError) as exc:
                problems.append(str(exc))
                continue
            fcntl.flock(fd, fcntl.LOCK_EX)
            _prune(base, keep=made.name)
            return cls(made, fd)
        raise ConfigError(
            "private /tmp: no directory of yours can hold it (" + "; ".join(problems) + "); "
            'set XDG_RUNTIME_DIR or HOME to a directory you own, or write tmp = "shared" in the profile'
        )

    def close(self) -> None:
        """Remove the directory and everything the commands left in it."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            _remove(self.path, fd)
        finally:
            os.close(fd)


def _make_session_dir(base: Path) -> Path:
    """A new, empty 0700 directory under ``base`` (``tempfile`` would cost the
    CLI's start-up an import of ``random``)."""
    for _ in range(100):
        path = base / (_PREFIX + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{base}: no free session name")


def _remove(path: Path, fd: int) -> None:
    """Remove ``path`` if it is still the directory ``fd`` holds (no link followed)."""
    try:
        here = os.lstat(path)
    except OSError:
        return
    mine = os.fstat(fd)
    if (here.st_dev, here.st_ino) != (mine.st_dev, mine.st_ino):
        return  # renamed or replaced: not ours to remove by this name
    import shutil  # only when a session ends

    _make_removable(path)
    shutil.rmtree(path, ignore_errors=True)  # fd-based on Linux: never follows a link


def _make_removable(path: Path) -> None:
    """A command may leave directories it cannot be entered (mode 0): give
    the owner its rights back so the tree can go (root needs none)."""
    if os.geteuid() == 0:
        return
    for dirpath, dirnames, _files in os.walk(path, followlinks=False):
        for name in dirnames:
            full = os.path.join(dirpath, name)
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(os.lstat(full).st_mode):
                    os.chmod(full, 0o700)


def _prune(base: Path, keep: str) -> None:
    """Remove the directories of sessions that died without closing."""
    now = time.time()
    try:
        names = [n for n in os.listdir(base) if n.startswith(_PREFIX) and n != keep]
    except OSError:
        return
    for name in names:
        path = base / name
        try:
            fd = os.open(path, _DIR_FLAGS)
        except OSError:
            continue
        try:
            if now - os.fstat(fd).st_ctime < _STALE_AFTER_S:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live session holds it
            _remove(path, fd)
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
