"""Links and special files a run made inside a git dir, removed when it ends.

Git never makes a symbolic link, a FIFO, a socket or a device inside a git
dir, but it writes through one it finds there: ``COMMIT_EDITMSG``,
``FETCH_HEAD``, ``logs/HEAD`` and the directories of ``objects`` and
``refs`` are opened by name, links followed.  Where git may commit (the
default ``git = "commit"``) or in a repository the run made, those names are
writable, so a run could point them at any file outside the sandbox; the
host's next ``git commit`` would then overwrite it (as the user, as root),
or append a reflog line a shell could later run.

So after each run every such entry the run created (its ctime is from the
run, or a directory above it inside the git dir changed during the run) in a
git dir inside the writable roots is unlinked, through directory fds that
follow no link, and reported.  Entries that were there before the run (the
user's own) are left alone.  Only directories whose ctime is from the run
are listed (an entry made, renamed or removed changes its directory's
ctime), so a large ``objects`` costs a ``stat`` per fan-out directory.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

from dsh.sandbox.policy_paths import is_within

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Directories listed per git dir: a bound on a planted maze (about a second).
_DIR_LIMIT = 100_000


def _planted(mode: int) -> bool:
    return stat.S_ISLNK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) \
        or stat.S_ISBLK(mode)


def remove_planted(git_dirs: Mapping[Path, int], roots: Sequence[Path]) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """Unlink the links and special files made inside each git dir of
    ``git_dirs`` that lies in ``roots``, since the time it maps to (0 for a
    git dir the run made or moved into place: all of them).  What was
    removed, and the git dirs too large to look through whole (a run may have
    filled one to hide a link past the bound: reported, never passed over
    in silence)."""
    removed: list[Path] = []
    incomplete: list[Path] = []
    for git_dir, since in git_dirs.items():
        if not any(is_within(git_dir, root) for root in roots):
            continue  # the run could not write there
        try:
            fd = os.open(git_dir, _DIR_FLAGS)
        except OSError:
            continue  # gone, or itself a link (reported as a changed .git entry)
        try:
            if not _clean(fd, git_dir, since, removed):
                incomplete.append(git_dir)
        finally:
            os.close(fd)
    return tuple(removed), tuple(incomplete)


#: What git reads and writes by name, looked through first (a level at a
#: time): a maze the run made elsewhere in the git dir cannot use up the bound
#: before these are seen.
_GIT_NAMES = frozenset(("HEAD", "logs", "refs", "heads", "tags", "remotes", "objects", "info", "pack", "worktrees",
                        "modules", "lfs", "hooks", "rr-cache"))


def _clean(top_fd: int, top: Path, since_ns: int, removed: list[Path]) -> bool:
    """One git dir; False when the bound stopped the walk."""
    # (the directory's parts below the git dir, inside a directory made or
    # renamed in during the run, whose entries keep their old ctimes: all of
    # them count).  Breadth first; each is opened again from the git dir's fd
    # a part at a time, following no link, so no more than two fds are open.
    queue: deque[tuple[tuple[str, ...], bool]] = deque([((), since_ns <= 0)])
    budget = _DIR_LIMIT
    while queue:
        parts, fresh = queue.popleft()
        if budget <= 0:
            return False
        try:
            fd = _open_below(top_fd, parts)
        except OSError:
            continue  # gone meanwhile, or no longer a directory
        try:
            info = os.fstat(fd)
            changed = fresh or info.st_ctime_ns >= since_ns
            # A directory unchanged since the start has no new entry; only its
            # subdirectories may (their number is the link count less 2 on
            # ext4, xfs and tmpfs: 2 means none; btrfs says 1, and is listed).
            if not changed and info.st_nlink == 2:
                continue
            budget -= 1
            with os.scandir(fd) as listing:
                entries = sorted(listing, key=lambda e: e.name not in _GIT_NAMES)
            for entry in entries:
                try:
                    mine = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(mine.st_mode):
                    queue.append(((*parts, entry.name), fresh or (changed and mine.st_ctime_ns >= since_ns)))
                    continue
                # Its own ctime: made, renamed or changed during the run.  One
                # that was there before (a user's own link) is left alone.
                if changed and _planted(mine.st_mode) and (fresh or mine.st_ctime_ns >= since_ns):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.name, dir_fd=fd)
                        removed.append(top.joinpath(*parts, entry.name))
        except OSError:
            pass
        finally:
            os.close(fd)
    return True


def _open_below(top_fd: int, parts: tuple[str, ...]) -> int:
    fd = os.dup(top_fd)
    for part in parts:
        try:
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = inner
    return fd
