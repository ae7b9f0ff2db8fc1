"""What a run created or changed among the files a later host action trusts.

Judged by comparing what the search finds after the run with what it found
before it, not by ctime alone: a repository or a trusted directory renamed
into place (``mv st sub/.git``) keeps the old ctimes of everything inside it,
yet it is new where git will look.  Every repository or named entry whose
(path, inode) was not there before is reported with all its executable parts;
in the ones that were, a file is reported when its ctime is from the run, or
when a directory above it (up to the entry) changed during the run (something
was renamed in).  Where the search was incomplete the report says so.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dsh.sandbox.enclosing_repo import enclosing_repository, named_by_config
from dsh.sandbox.git_config import host_entries, host_named_paths, programs_named_in_config
from dsh.sandbox.protected_scan import GIT_CONTROL_PARTS, Found, git_dirs_of

_REPORT_LIMIT = 2_000  # entries looked at per trusted entry: a report, not an inventory
_LINK_DEPTH = 4  # links followed in a chain of links


@dataclass(frozen=True)
class Baseline:
    """What the search found when a run started, and when that was."""

    since_ns: int
    found: Found
    #: (st_dev, st_ino) of every git dir behind a repository found then (the
    #: ones a ``.git`` file or a ``commondir`` names included).  A git dir
    #: that is not there, or is another directory now, was made or moved into
    #: place by the run: all of it is the run's, whatever its ctimes say.
    #: ``None``: not recorded (every git dir is judged by ctime).
    git_dirs: Mapping[Path, tuple[int, int]] | None = None


def git_dir_identities(repos: Iterable[Path]) -> dict[Path, tuple[int, int]]:
    """``Baseline.git_dirs`` for the repositories ``repos``."""
    out: dict[Path, tuple[int, int]] = {}
    for dot_git in repos:
        for git_dir in git_dirs_of(dot_git):
            try:
                info = os.lstat(git_dir)
            except OSError:
                continue
            out[git_dir] = (info.st_dev, info.st_ino)
    return out


@dataclass(frozen=True)
class Changes:
    """Trusted files the run created or changed, and where nothing was searched."""

    paths: tuple[Path, ...] = ()
    unsearched: tuple[Path, ...] = ()
    #: Links and special files the run made inside a git dir, removed after it
    #: (``git_dir_links``): git would have written through them.
    removed: tuple[Path, ...] = ()


def run_started_ns() -> int:
    """The time to compare ctimes with, taken before a run.

    The kernel stamps files from its coarse clock (one tick behind the precise
    one): a file written a millisecond after ``time.time_ns()`` can carry an
    earlier ctime.  The coarse clock itself never runs ahead of a later stamp.
    """
    coarse = getattr(time, "CLOCK_REALTIME_COARSE", None)
    if coarse is not None:
        return time.clock_gettime_ns(coarse)
    return time.time_ns() - 50_000_000  # no coarse clock: a margin of a few ticks


def _fresh(path: str, since_ns: int) -> bool:
    try:
        return os.lstat(path).st_ctime_ns >= since_ns
    except OSError:
        return False


def _collect(path: str, since_ns: int, hits: list[Path], roots: Sequence[Path] = (), depth: int = 0) -> None:
    """Files at or under ``path`` changed at or after ``since_ns``; under a
    directory changed then, every file (it may have been renamed in whole).
    Directories are not reported (their files are what runs), nor are
    ``hooks/*.sample``: git never runs them, and ``git init`` writes a dozen
    that would bury the one that matters.  A symbolic link (``path`` itself or
    one inside it) whose target lies in ``roots`` is followed: what changed
    behind it is reported under the link's name, the one the host reads."""
    try:
        st = os.lstat(path)
    except (OSError, ValueError):
        return
    if stat.S_ISLNK(st.st_mode):
        _through_link(path, since_ns, hits, roots, depth)
    if not stat.S_ISDIR(st.st_mode):
        if st.st_ctime_ns >= since_ns:
            hits.append(Path(path))
        return
    limit = _REPORT_LIMIT
    stack = [(path, 0 if st.st_ctime_ns >= since_ns else since_ns)]
    while stack and limit > 0:
        here, since = stack.pop()
        samples = os.path.basename(here) == "hooks"
        try:
            with os.scandir(here) as it:
                for entry in it:
                    limit -= 1
                    if samples and entry.name.endswith(".sample"):
                        continue
                    try:
                        est = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(est.st_mode):
                        stack.append((entry.path, 0 if est.st_ctime_ns >= since else since))
                    else:
                        if est.st_ctime_ns >= since:
                            hits.append(Path(entry.path))
                        if stat.S_ISLNK(est.st_mode):
                            _through_link(entry.path, since, hits, roots, depth)
        except OSError:
            continue


def _through_link(link: str, since_ns: int, hits: list[Path], roots: Sequence[Path], depth: int) -> None:
    """What changed behind a link into a writable root, named through the link."""
    target = os.path.realpath(link)
    if depth >= _LINK_DEPTH or not any(r == Path(target) or r in Path(target).parents for r in roots):
        return
    found: list[Path] = []
    _collect(target, since_ns, found, roots, depth + 1)
    for hit in found:
        rel = os.path.relpath(hit, target)
        hits.append(Path(link) if rel == "." else Path(link, rel))


def _moved_in(path: Path, top: Path, since_ns: int) -> bool:
    """A directory strictly between ``top`` and ``path`` changed during the run."""
    return any(_fresh(str(p), since_ns) for p in path.parents if top in p.parents)


def _links_out_of_the_search(after: Found, since_ns: int) -> list[Path]:
    """Links the run made in a deep-searched root to a directory in a root the
    search does not walk into (the sandbox HOME and private ``/tmp``, searched
    one level deep: tool caches are huge).  A
    repository planted deep in the HOME is reached by the host through such a
    link (``ws/docs -> $HOME/deep/docs``: ``cd ws/docs && git status`` runs its
    config): reported, as the repository behind it cannot be judged."""
    out: list[Path] = []
    for link in after.links:
        try:
            if os.lstat(link).st_ctime_ns < since_ns:
                continue
        except OSError:
            continue
        try:
            target = Path(os.path.realpath(link))
        except OSError:
            # A link swapped while it is read (ELOOP, EINVAL): what it points
            # at cannot be judged, so it is reported.
            out.append(link)
            continue
        # Outside every root the command could not have planted anything.
        if not target.is_dir() or not any(r == target or r in target.parents for r in after.shallow):
            continue
        out.append(link)
    return out


def git_dirs_since(before: Baseline, after: Found) -> dict[Path, int]:
    """Each git dir of the repositories found before or after the run (a
    search that stopped early after it still names the ones from before),
    with the time to judge its entries from: the run's start, or 0 for a
    repository or git dir that is new or another one now."""
    known = set(before.found.identity)
    inode = dict(after.identity)
    out: dict[Path, int] = {}
    for dot_git in dict.fromkeys((*before.found.repos, *after.repos)):
        since = before.since_ns if (dot_git, inode.get(dot_git, -1)) in known or dot_git not in inode else 0
        for git_dir in git_dirs_of(dot_git):
            mine = since if _same_git_dir(before, git_dir) else 0
            out[git_dir] = min(out.get(git_dir, mine), mine)
    return out


def _same_git_dir(before: Baseline, git_dir: Path) -> bool:
    """Is ``git_dir`` the directory that was there when the run started?"""
    if before.git_dirs is None:
        return True
    try:
        info = os.lstat(git_dir)
    except OSError:
        return True  # gone: nothing in it to judge
    return before.git_dirs.get(git_dir) == (info.st_dev, info.st_ino)


def trusted_changes(before: Baseline, after: Found) -> Changes:
    """Git control parts of every repository (and a ``.git`` file or link
    itself), the files git's configuration names (the repository's and the
    host's), and every entry with a protected name and what it holds, that the
    run created or changed, including through links into the writable roots."""
    known = set(before.found.identity)
    inode = dict(after.identity)
    since_ns = before.since_ns
    roots = after.roots
    hits: list[Path] = []
    host = host_entries()
    for dot_git in after.repos:
        since = since_ns if (dot_git, inode.get(dot_git, -1)) in known else 0
        if not os.path.isdir(dot_git) or os.path.islink(dot_git):
            _collect(str(dot_git), since, hits)  # a .git file or link: a new pointer to a git dir
        targets = git_dirs_of(dot_git)
        for git_dir in targets:
            mine = since if _same_git_dir(before, git_dir) else 0
            for part in GIT_CONTROL_PARTS:
                _collect(os.path.join(git_dir, part), mine, hits, roots)
        for program in programs_named_in_config(dot_git, targets, roots, host):
            moved = _moved_in(program, dot_git.parent, since_ns)
            _collect(str(program), 0 if moved else since, hits, roots)
    for path in host_named_paths(roots, host) if roots else ():
        _collect(str(path), since_ns, hits, roots)
    # The repository above a root: what its config runs inside the roots.
    for repo in {r for r in map(enclosing_repository, roots) if r is not None}:
        for path in named_by_config(repo, roots):
            _collect(str(path), since_ns, hits, roots)
    for path in after.named:
        since = since_ns if (path, inode.get(path, -1)) in known else 0
        _collect(str(path), since, hits, roots)
    hits += _links_out_of_the_search(after, since_ns)
    return Changes(tuple(sorted(set(hits))), after.incomplete)
