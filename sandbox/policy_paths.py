"""Path rules of the policy service: canonical forms, system directories, protected paths.

Pure functions over the filesystem as it is now; the service (``policy_service``)
decides when to call them.  Everything returned is absolute and canonical
(symlinks and ``..`` resolved; a missing tail is kept as written).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.lazy_pattern import LazyPattern

ALWAYS_PROTECTED = (".git", ".dsh")

# Never writable outside danger-full-access: these trees and everything in them
# (writing there changes the system for every later command) ...
# fmt: off
SYSTEM_TREES = tuple(Path(p) for p in (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
    "/sys", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec",
    "/usr/include", "/usr/share", "/usr/games", "/usr/local/bin", "/usr/local/sbin", "/usr/local/lib",
    "/usr/local/lib64", "/usr/local/libexec", "/usr/local/etc", "/usr/local/share", "/usr/local/include",
    "/usr/local/games", "/usr/local/man", "/usr/local/Homebrew", "/usr/local/Cellar",
    "/System", "/private/etc",
))
# ... and these directories themselves (their subdirectories are ordinary
# places for projects, e.g. /home/me/src or /usr/src/app).
SYSTEM_DIRS = tuple(Path(p) for p in (
    "/", "/home", "/Users", "/var", "/opt", "/srv", "/root", "/mnt", "/media",
    "/Applications", "/Library", "/private", "/private/var",
))
# fmt: on

_VAR = LazyPattern(r"\$(?:\{(\w+)\}|(\w+))")
_SMALL_FILE_MAX = 4096
_REALPATH_ATTEMPTS = 5


def canonical(path: str | Path, base: Path | None = None) -> Path:
    """Absolute path with symlinks and ``..`` resolved (missing tails kept lexically)."""
    p = Path(path)
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    for _ in range(_REALPATH_ATTEMPTS):
        try:
            return Path(os.path.realpath(p))
        except OSError:
            # A link replaced between realpath's lstat and readlink (EINVAL):
            # something is swapping it; resolve again.
            continue
    # Not the caller's input: the filesystem moves under it (exit 125, as any raced path).
    raise SandboxUnavailable(f"{p} keeps changing while it is resolved (a symlink swapped back and forth); "
                             "nothing ran, retry once nothing moves it")


def expand(text: str) -> str | None:
    """``~`` and ``$VAR``/``${VAR}`` expanded; ``None`` when a variable is unset."""
    missing: list[str] = []

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        value = os.environ.get(name)
        if value is None:
            missing.append(name)
            return m.group(0)
        return value

    out = _VAR.sub(sub, os.path.expanduser(text))
    return None if missing else out


def is_within(path: Path, root: Path) -> bool:
    """``path == root or root in path.parents``, compared part by part: the
    checks run for every hidden path (one per other workspace) at each
    resolve, and walking ``parents`` builds a new path per level."""
    top = root.parts
    if not top:  # ".": an ancestor of every relative path, of no absolute one
        return not path.is_absolute()
    return path.parts[: len(top)] == top


def path_within(path: str, root: str) -> bool:
    """``is_within`` for normalized absolute paths given as strings (what the
    mount planners hold): no ``Path`` built per test."""
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def home_dir() -> Path | None:
    try:
        return canonical(Path.home())
    except RuntimeError:  # no HOME and no passwd entry
        return None


def system_dir_reason(path: Path) -> str | None:
    """Why ``path`` (canonical) may not be a writable root, or ``None``."""
    if path == Path("/"):
        return "it is the whole filesystem"
    if path in SYSTEM_DIRS:
        return "it is a system directory"
    for tree in SYSTEM_TREES:
        if is_within(path, tree):
            return f"it is inside the system directory {tree}"
        if path in tree.parents:
            return f"it contains the system directory {tree}"
    home = home_dir()
    if path == home:
        # Shell start-up files and ~/.ssh live there: writing them outlives the sandbox.
        return "it is your home directory (shell start-up files, ~/.ssh)"
    return None


def read_small_file(path: Path, limit: int = _SMALL_FILE_MAX) -> str | None:
    """The start of a regular file, or ``None``.

    Opened non-blocking and checked after opening, so a FIFO or device swapped in
    under a name (``.git``, ``commondir``) can neither hang nor feed the reader.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def git_dirs(dot_git: Path) -> list[Path]:
    """The real git dir(s) a ``.git`` *file* points to (``gitdir: <path>``).

    A relative ``gitdir`` is relative to the ``.git`` file's directory.  A
    worktree's git dir has a ``commondir`` file naming the main repository's git
    dir (hooks, config run on the host): that one is returned too.
    """
    text = read_small_file(dot_git)
    if text is None:
        return []
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = canonical(line[len("gitdir:") :].strip(), dot_git.parent)
            found = [target]
            common = (read_small_file(target / "commondir") or "").strip()
            if common:
                found.append(canonical(common.splitlines()[0], target))
            return found
    return []


def protected_under(root: Path, names: Iterable[str]) -> set[Path]:
    """Protected paths of one writable root, existing or not.

    Each ``<root>/<name>`` is kept as named (so it stays read-only even before it
    exists) plus its canonical target when it is (or goes through) a symlink.
    Repositories (``.git``) are not handled here: see ``protected_scan``.
    """
    out: set[Path] = set()
    for name in names:
        if name == ".git":
            continue
        named = root / name
        out.add(named)
        out.add(canonical(named))
    return out


def sorted_paths(paths: Iterable[Path]) -> tuple[Path, ...]:
    # The order of ``Path.__lt__`` (its parts), without a Python call per comparison.
    return tuple(sorted(set(paths), key=lambda p: p.parts))


def fixed_symlink(path: str | Path, uid: int) -> bool:
    """Is ``path`` a symlink that a command running as ``uid`` without any
    capability can neither remove nor replace?

    It can when it owns the link or the directory holding it, or when that
    directory is not sticky.  Anyone can plant ``/tmp/.dsh`` (a protected name
    in a temporary root); such a link, owned by another user in a sticky
    directory the command does not own, stays what it is for the whole run.
    Only the last component may be a link, and its target must be link-free:
    a chain could be re-pointed at a link the command owns.
    """
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    try:
        link = os.lstat(path)
        holder = os.lstat(parent)
        target = os.path.join(parent, os.readlink(path))
    except OSError:
        return False
    return (
        stat.S_ISLNK(link.st_mode)
        and bool(holder.st_mode & stat.S_ISVTX)
        and uid not in (link.st_uid, holder.st_uid)
        and os.path.realpath(parent) == parent
        and os.path.realpath(target) == os.path.normpath(target)
    )
