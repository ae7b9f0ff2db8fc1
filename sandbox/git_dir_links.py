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
from collections.abc import Mapping, Sequence
from pathlib import Path

from dsh.sandbox.policy_paths import is_within

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Directories looked at per git dir: a bound on a planted maze.
_DIR_LIMIT = 5_000


def _planted(mode: int) -> bool:
    return stat.S_ISLNK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) \
        or stat.S_ISBLK(mode)


def remove_planted(git_dirs: Mapping[Path, int], roots: Sequence[Path]) -> tuple[Path, ...]:
    """Unlink the links and special files made inside each git dir of
    ``git_dirs`` that lies in ``roots``, since the time it maps to (0 for a
    repository the run made: all of them); what was removed."""
    removed: list[Path] = []
    for git_dir, since in git_dirs.items():
        if not any(is_within(git_dir, root) for root in roots):
            continue  # the run could not write there
        try:
            fd = os.open(git_dir, _DIR_FLAGS)
        except OSError:
            continue  # gone, or itself a link (reported as a changed .git entry)
        try:
            _clean(fd, git_dir, since, removed)
        finally:
            os.close(fd)
    return tuple(removed)


def _clean(top_fd: int, top: Path, since_ns: int, removed: list[Path]) -> None:
    # (fd, path, inside a directory made or renamed in during the run, whose
    # entries keep their old ctimes: all of them count).
    stack = [(os.dup(top_fd), top, False)]
    budget = _DIR_LIMIT
    while stack:
        fd, path, fresh = stack.pop()
        try:
            info = os.fstat(fd)
            changed = fresh or info.st_ctime_ns >= since_ns
            # A directory unchanged since the start has no new entry; only its
            # subdirectories may (their number is the link count less 2 on
            # ext4, xfs and tmpfs: 2 means none; btrfs says 1, and is listed).
            if (not changed and info.st_nlink == 2) or budget <= 0:
                continue
            budget -= 1
            with os.scandir(fd) as listing:
                entries = list(listing)
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        sub = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                        stack.append((sub, path / entry.name, fresh or (_ctime(sub) >= since_ns and changed)))
                    continue
                if not changed:
                    continue
                try:
                    mine = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                # Its own ctime: made, renamed or changed during the run.  One
                # that was there before (a user's own link) is left alone.
                if _planted(mine.st_mode) and (fresh or mine.st_ctime_ns >= since_ns):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.name, dir_fd=fd)
                        removed.append(path / entry.name)
        except OSError:
            pass
        finally:
            os.close(fd)


def _ctime(fd: int) -> int:
    return os.fstat(fd).st_ctime_ns
