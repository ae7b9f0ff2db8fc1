"""Files a later host action trusts, found at any depth under the writable roots.

A sandboxed command may write anywhere in a writable root, but some files there
are run or trusted later by the host: a git repository's hooks and config (run
by the user's next ``git status``), shell start-up files, editor, agent and
cloud-tool configuration.  This module finds them so that

- the policy service keeps the ones that exist read-only (``protected_paths``),
  in every repository at any depth, not just at the root of the workspace; and
- after a run, the host reports the ones the command created or changed
  (``changed_since``): a ``git init`` or a planted ``.vscode/tasks.json`` is
  allowed, but never goes unnoticed.

Walking a big tree for every command would be slow, so ``TreeIndex`` remembers
each directory's listing with its inode and ctime: a directory whose entries
changed has a new ctime (which a command cannot set back), and only those are
listed again.  A refresh of an unchanged tree costs one ``lstat`` per directory.
The walk is bounded; a root it could not finish is reported, never ignored.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dsh.sandbox.policy_paths import canonical, git_dirs, read_small_file

GitAccess = Literal["read-only", "commit"]
GIT_ACCESS: tuple[GitAccess, ...] = ("read-only", "commit")

#: Names whose content the host or the user's tools run or trust later, kept
#: read-only wherever they exist under a writable root and reported when a run
#: creates or changes them.  Shell start-up files and direnv run on the next
#: shell or ``cd``; editor and agent configs run tasks, hooks and MCP servers;
#: package-manager configs redirect registries or the shell scripts run in;
#: credential directories hold keys a command must not replace.
DEFAULT_PROTECTED_NAMES: tuple[str, ...] = (
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
    ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".envrc", ".gitconfig", ".ripgreprc",
    ".vscode", ".idea", ".claude", ".codex", ".agents", ".cursor", ".mcp.json", ".devcontainer",
    ".husky",
    ".npmrc", ".yarnrc", ".yarnrc.yml", ".pypirc", ".netrc",
    ".aws", ".ssh", ".gnupg", ".docker", ".kube",
)  # fmt: skip

#: The parts of a git dir that git runs or trusts: hooks and config (which
#: names ``core.fsmonitor``, ``core.hooksPath``, ``core.sshCommand``, aliases,
#: filters, ``diff.external``), ``info`` (attributes pick filters), nested
#: repositories (``modules``, ``worktrees``), the links that move the common
#: dir or the config elsewhere, legacy remotes, and the scripts of a rebase or
#: sequencer in progress (``exec`` lines run on ``--continue``).
GIT_CONTROL_PARTS: tuple[str, ...] = (
    "hooks", "config", "config.worktree", "info", "modules", "worktrees", "commondir",
    "gitdir", "remotes", "branches", "rebase-merge", "rebase-apply", "sequencer",
)  # fmt: skip

#: Config keys whose value may name a program in the working tree that git runs
#: (husky sets ``core.hooksPath = .husky``): that path is protected as hooks are.
_PROGRAM_KEYS = re.compile(r"^\s*(hookspath|fsmonitor)\s*=\s*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)
_CONFIG_MAX = 256 * 1024

#: Entries walked before a root is given up as too big (about 1 s when cold).
DEFAULT_MAX_ENTRIES = 300_000


@dataclass(frozen=True)
class Found:
    """The trusted entries under some roots, as they are now."""

    repos: tuple[Path, ...]  # every ``.git`` entry (directory, file or link), every bare-looking git dir
    named: tuple[Path, ...]  # every entry with a protected name
    incomplete: tuple[Path, ...]  # roots whose walk hit the entry bound


@dataclass(frozen=True)
class _Listing:
    key: tuple[int, int, int]  # (st_dev, st_ino, st_ctime_ns) when listed
    subdirs: tuple[str, ...]
    repos: tuple[str, ...]
    named: tuple[str, ...]
    entries: int
    git_dir: bool  # holds HEAD, objects and refs: git runs it as a (bare) repository


#: What makes git take a directory for a git dir when it is run inside it (a
#: bare repository needs no ``.git``: ``safe.bareRepository`` is ``all`` by default).
_GIT_DIR_NAMES = frozenset(("HEAD", "objects", "refs"))


def _key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


class TreeIndex:
    """Listings of the directories under some roots, refreshed where they changed."""

    def __init__(self, names: Iterable[str], max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.names = frozenset(names) - {".git"}
        self.max_entries = max_entries
        self._listings: dict[str, _Listing] = {}
        self._lock = threading.Lock()

    def refresh(self, roots: Sequence[Path], shallow: Sequence[Path] = ()) -> Found:
        """What is under ``roots`` at any depth, and directly inside ``shallow``."""
        repos: list[Path] = []
        named: list[Path] = []
        incomplete: list[Path] = []
        with self._lock:
            seen: set[str] = set()
            for root in roots:
                if not self._walk(str(root), repos, named, seen):
                    incomplete.append(root)
            for root in shallow:
                listing = self._listing(str(root))
                seen.add(str(root))
                if listing is not None:
                    repos.extend([root] if listing.git_dir else [])
                    repos.extend(root / n for n in listing.repos)
                    named.extend(root / n for n in listing.named)
            # Forget directories that are gone (bounded memory over a long session).
            for gone in self._listings.keys() - seen:
                del self._listings[gone]
        return Found(tuple(sorted(set(repos))), tuple(sorted(set(named))), tuple(incomplete))

    def _walk(self, root: str, repos: list[Path], named: list[Path], seen: set[str]) -> bool:
        budget = self.max_entries
        stack = [root]
        while stack:
            path = stack.pop()
            if path in seen:
                continue  # a root nested in another root
            seen.add(path)
            listing = self._listing(path)
            if listing is None:
                continue
            budget -= listing.entries
            if budget < 0:
                return False
            if listing.git_dir:
                repos.append(Path(path))  # its hooks and config are not walked into
                continue
            repos.extend(Path(path, n) for n in listing.repos)
            named.extend(Path(path, n) for n in listing.named)
            stack.extend(os.path.join(path, n) for n in listing.subdirs)
        return True

    def _listing(self, path: str) -> _Listing | None:
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        cached = self._listings.get(path)
        if cached is not None and cached.key == _key(st):
            return cached
        subdirs: list[str] = []
        repos: list[str] = []
        named: list[str] = []
        marks: set[str] = set()
        entries = 0
        try:
            with os.scandir(path) as it:
                for entry in it:
                    entries += 1
                    if entry.name in _GIT_DIR_NAMES:
                        marks.add(entry.name)
                    if entry.name == ".git":
                        repos.append(entry.name)  # never walked into: protected or reported whole
                    elif entry.name in self.names:
                        named.append(entry.name)
                    elif entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry.name)
        except OSError:
            return None  # unreadable to us: nor can we protect it (reported by the runner)
        git_dir = marks == _GIT_DIR_NAMES
        listing = _Listing(_key(st), tuple(subdirs), tuple(repos), tuple(named), entries, git_dir)
        self._listings[path] = listing
        return listing


# -- what to keep read-only -----------------------------------------------------------
def _is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def git_dirs_of(dot_git: Path) -> list[Path]:
    """The git dir(s) behind a ``.git`` entry: itself, or where a ``.git`` file points."""
    if _is_real_dir(dot_git):
        return [dot_git]
    out = [canonical(dot_git)] if os.path.isdir(dot_git) else []
    return out + git_dirs(dot_git)


def protected_in_repo(dot_git: Path, access: GitAccess) -> set[Path]:
    """What stays read-only in one repository (``dot_git`` is its ``.git`` entry).

    ``read-only``: the whole git dir(s).  ``commit``: the ``.git`` entry itself
    when it is a file or a link, and the existing control parts of each git
    dir; objects, refs, logs, the index and the HEAD files stay writable.  A
    control part that does not exist yet is not held open (git would read an
    empty placeholder as a broken repository): creating one is reported after
    the run instead.
    """
    # Found by a walk that follows no symlink under a canonical root: a real
    # directory's path is canonical already.
    real_dir = _is_real_dir(dot_git)
    targets = git_dirs_of(dot_git)
    if access == "read-only":
        whole = {dot_git, *targets} if real_dir else {dot_git, canonical(dot_git), *targets}
        return whole | programs_named_in_config(dot_git, targets)
    # The git directory itself stays writable (lock files, renames over HEAD).
    out: set[Path] = set() if real_dir else {dot_git, canonical(dot_git)}
    for git_dir in targets:
        for part in GIT_CONTROL_PARTS:
            if os.path.lexists(git_dir / part):
                out.add(git_dir / part)
    return out | programs_named_in_config(dot_git, targets)


def programs_named_in_config(dot_git: Path, git_dirs: Sequence[Path]) -> set[Path]:
    """Working-tree paths the repository's config tells git to run (``core.hooksPath``,
    a ``core.fsmonitor`` path): a command that rewrote them would have its
    code run by the user's next commit or status.  Values that name no
    existing path (``true``, a program on ``PATH``) are ignored."""
    out: set[Path] = set()
    for git_dir in git_dirs:
        # Never a plain open: a FIFO planted as config would hang the host.
        text = read_small_file(git_dir / "config", _CONFIG_MAX)
        if text is None:
            continue
        for _key, raw in _PROGRAM_KEYS.findall(text):
            value = os.path.expanduser(raw.strip().strip('"'))
            if not value or value.lower() in ("true", "false"):
                continue
            path = Path(value) if os.path.isabs(value) else dot_git.parent / value
            if os.path.lexists(path):
                out |= {path, canonical(path)}
    return out


def protected_from(found: Found, access: GitAccess, roots: Sequence[Path] = ()) -> set[Path]:
    """Every path to keep read-only for what ``refresh`` found.

    A directory laid out as a git dir that is, or holds, a writable root (a
    workspace made to look like a bare repository) cannot be read-only as a
    whole without making the root read-only: its control parts are.  (A
    ``.git`` file or link pointing at an ancestor of a root keeps failing
    closed: the policy service refuses a root inside a protected path.)
    """
    out: set[Path] = set()
    for dot_git in found.repos:
        holds_root = dot_git.name != ".git" and any(r == dot_git or dot_git in r.parents for r in roots)
        out |= protected_in_repo(dot_git, "commit" if holds_root else access)
    for path in found.named:
        out.add(path)
        if os.path.islink(path):
            out.add(canonical(path))
    return out


# -- what a run changed ---------------------------------------------------------------
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


def _collect(path: str, since_ns: int, hits: list[Path], limit: int = 2_000) -> None:
    """Files at or under ``path`` (no symlink followed) whose ctime is at or after
    ``since_ns``.  Directories are not reported (their files are what runs), nor
    are ``hooks/*.sample``: git never runs them, and ``git init`` writes a dozen
    that would bury the one that matters."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        if st.st_ctime_ns >= since_ns:
            hits.append(Path(path))
        return
    stack = [path]
    while stack and limit > 0:
        here = stack.pop()
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
                        stack.append(entry.path)
                    elif est.st_ctime_ns >= since_ns:
                        hits.append(Path(entry.path))
        except OSError:
            continue


def changed_since(found: Found, since_ns: int) -> tuple[Path, ...]:
    """Trusted files created or changed at or after ``since_ns`` (ctime, which a
    command cannot set back): git control parts of every repository (and a
    ``.git`` file or link itself), and every entry with a protected name and
    what it holds."""
    hits: list[Path] = []
    for dot_git in found.repos:
        if not _is_real_dir(dot_git):
            _collect(str(dot_git), since_ns, hits)  # a .git file or link: a new pointer to a git dir
        for git_dir in git_dirs_of(dot_git):
            for part in GIT_CONTROL_PARTS:
                _collect(os.path.join(git_dir, part), since_ns, hits)
    for path in found.named:
        _collect(str(path), since_ns, hits)
    return tuple(sorted(set(hits)))
